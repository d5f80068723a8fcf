"""MODE SENSE / MODE SELECT (SPC-4 6.11-6.14) with the Caching (SBC-3 6.4.5),
Control (SPC-4 7.5.8) and Informational Exceptions Control (SPC-4 7.5.11) pages."""

from __future__ import annotations

from collections.abc import Callable

from . import _cdb as op
from ._cdb import truncate, u16
from ._sense import (
    MODE_PARAMETERS_CHANGED,
    SAVING_PARAMETERS_NOT_SUPPORTED,
    CheckConditionError,
    SenseKey,
    field_pointer,
    invalid_field_in_cdb,
    invalid_field_in_parameters,
    parameter_list_length_error,
)
from ._state import LuState, ModeState
from ._types import ScsiCommand, ScsiResult, Status

PC_CURRENT = 0
PC_CHANGEABLE = 1
PC_DEFAULT = 2
PC_SAVED = 3
ALL_PAGES = 0x3F
CACHING = 0x08
CONTROL = 0x0A
INFORMATIONAL_EXCEPTIONS = 0x1C
DPOFUA = 0x10
WP = 0x80

PageBuilder = Callable[[ModeState, int], bytes]


def caching_page(mode: ModeState, pc: int) -> bytes:
    """Caching mode page: only WCE is changeable; RCD stays 0 (read cache on)."""
    page = bytearray(20)
    page[0], page[1] = CACHING, 0x12
    wce = mode.wce if pc == PC_CURRENT else mode.default_wce
    if pc == PC_CHANGEABLE or wce:
        page[2] = 0x04
    return bytes(page)


def control_page(mode: ModeState, pc: int) -> bytes:
    """Control mode page: D_SENSE and SWP are changeable; GLTSD, unrestricted reordering."""
    page = bytearray(12)
    page[0], page[1] = CONTROL, 0x0A
    if pc == PC_CHANGEABLE:
        page[2], page[4] = 0x04, 0x08
        return bytes(page)
    current = pc == PC_CURRENT
    page[2] = 0x02 | (0x04 if current and mode.d_sense else 0)
    page[3] = 0x10  # QUEUE ALGORITHM MODIFIER 1: unrestricted reordering allowed
    page[4] = 0x08 if current and mode.swp else 0
    page[8:10] = b"\xff\xff"  # BUSY TIMEOUT PERIOD: unlimited
    return bytes(page)


def informational_exceptions_page(mode: ModeState, pc: int) -> bytes:
    """Informational Exceptions Control page: DEXCPT set, nothing changeable."""
    page = bytearray(12)
    page[0], page[1] = INFORMATIONAL_EXCEPTIONS, 0x0A
    if pc != PC_CHANGEABLE:
        page[2] = 0x08
    return bytes(page)


PAGES: dict[int, PageBuilder] = {
    CACHING: caching_page,
    CONTROL: control_page,
    INFORMATIONAL_EXCEPTIONS: informational_exceptions_page,
}


def _select_pages(mode: ModeState, page: int, subpage: int, pc: int) -> bytes:
    if subpage not in (0x00, 0xFF):
        raise invalid_field_in_cdb(3)
    if page == ALL_PAGES:
        return b"".join(build(mode, pc) for build in PAGES.values())
    build = PAGES.get(page)
    if build is None:
        raise invalid_field_in_cdb(2, 5)
    return build(mode, pc)


def _block_descriptor(st: LuState, long_lba: bool) -> bytes:
    """Short (8-byte) or long (16-byte) LBA mode parameter block descriptor."""
    if long_lba:
        return st.num_blocks.to_bytes(8, "big") + bytes(4) + st.block_size.to_bytes(4, "big")
    blocks = min(st.num_blocks, 0xFFFFFFFF)
    return blocks.to_bytes(4, "big") + b"\x00" + st.block_size.to_bytes(3, "big")


async def mode_sense(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """MODE SENSE(6) and (10); saved values are not supported (39/00)."""
    cdb = cmd.cdb
    ten = cdb[0] == op.MODE_SENSE_10
    pc, page = cdb[2] >> 6, cdb[2] & 0x3F
    if pc == PC_SAVED:
        raise CheckConditionError(
            SenseKey.ILLEGAL_REQUEST, SAVING_PARAMETERS_NOT_SUPPORTED, sks=field_pointer(2, 7)
        )
    pages = _select_pages(st.mode, page, cdb[3], pc)
    long_lba = ten and bool(cdb[1] & 0x10)
    descriptor = b"" if cdb[1] & 0x08 else _block_descriptor(st, long_lba)
    specific = (WP if st.write_protected else 0) | DPOFUA
    body = descriptor + pages
    if ten:
        header = (len(body) + 6).to_bytes(2, "big") + bytes(
            (0, specific, 0x01 if long_lba and descriptor else 0, 0)
        )
        header += len(descriptor).to_bytes(2, "big")
        alloc = u16(cdb, 7)
    else:
        header = bytes((len(body) + 3, 0, specific, len(descriptor)))
        alloc = cdb[4]
    return ScsiResult(Status.GOOD, truncate(header + body, alloc))


def _check_block_descriptors(
    st: LuState, data: memoryview, start: int, length: int, long_lba: bool
) -> None:
    """Block descriptors may only restate the current block length."""
    size = 16 if long_lba else 8
    if length % size:
        raise invalid_field_in_parameters(start - 1)
    for pos in range(start, start + length, size):
        block_length = int.from_bytes(data[pos + size - 3 : pos + size], "big")
        if block_length not in (0, st.block_size):
            raise invalid_field_in_parameters(pos + size - 3)


def _parse_pages(data: memoryview, pos: int) -> list[tuple[int, bytes]]:
    """The (page code, page bytes) of a MODE SELECT parameter list from ``pos`` on."""
    pages: list[tuple[int, bytes]] = []
    while pos < len(data):
        if data[pos] & 0x40:
            raise invalid_field_in_parameters(pos, 6)  # no subpages are implemented
        if pos + 2 > len(data):
            raise parameter_list_length_error()
        code, length = data[pos] & 0x3F, data[pos + 1]
        build = PAGES.get(code)
        if build is None:
            raise invalid_field_in_parameters(pos, 5)
        if length != build(ModeState(wce=False), PC_CHANGEABLE)[1]:
            raise invalid_field_in_parameters(pos + 1)
        if pos + 2 + length > len(data):
            raise parameter_list_length_error()
        pages.append((code, bytes(data[pos : pos + 2 + length])))
        pos += 2 + length
    return pages


def _apply(mode: ModeState, code: int, page: bytes) -> bool:
    """Takes the changeable bits of ``page``; True when a value changed.

    Non-changeable fields are not compared with the current values: initiators
    (Linux sd, libiscsi) echo back what MODE SENSE returned, possibly re-encoded.
    """
    before = (mode.wce, mode.d_sense, mode.swp)
    if code == CACHING:
        mode.wce = bool(page[2] & 0x04)
    elif code == CONTROL:
        mode.d_sense = bool(page[2] & 0x04)
        mode.swp = bool(page[4] & 0x08)
    return before != (mode.wce, mode.d_sense, mode.swp)


async def mode_select(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """MODE SELECT(6) and (10): parameters are applied only if the whole list is valid."""
    cdb = cmd.cdb
    ten = cdb[0] == op.MODE_SELECT_10
    if cdb[1] & 0x01:
        raise invalid_field_in_cdb(1, 0)  # SP: saving parameters is not supported
    length = u16(cdb, 7) if ten else cdb[4]
    data = memoryview(cmd.data_out)[:length]
    if length == 0:
        return ScsiResult(Status.GOOD)
    header = 8 if ten else 4
    if len(data) < header:
        raise parameter_list_length_error()
    descriptors = u16(data, 6) if ten else data[3]
    if header + descriptors > len(data):
        raise parameter_list_length_error()
    _check_block_descriptors(st, data, header, descriptors, ten and bool(data[4] & 0x01))
    changed = False
    for code, page in _parse_pages(data, header + descriptors):
        changed |= _apply(st.mode, code, page)
    if changed:
        st.ua.establish(MODE_PARAMETERS_CHANGED, exclude=cmd.nexus)
    return ScsiResult(Status.GOOD)
