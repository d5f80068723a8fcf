"""REPORT SUPPORTED OPERATION CODES (SPC-4 6.35): the command table with the CDB
usage data of every command this logical unit implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import _cdb as op
from ._cdb import truncate, u16, u32
from ._sense import invalid_field_in_cdb
from ._types import ScsiCommand, ScsiResult, Status

if TYPE_CHECKING:
    from ._state import LuState

NOMINAL_TIMEOUT = 0
RECOMMENDED_TIMEOUT = 30
SUPPORTED = 0x03  # SUPPORT 011b: supported in conformance with a SCSI standard
NOT_SUPPORTED = 0x01


@dataclass(frozen=True, slots=True)
class CommandInfo:
    """One supported command: opcode, service action (None if it has none) and the
    CDB usage bit map, whose first byte is the operation code itself."""

    opcode: int
    service_action: int | None
    usage: bytes


def _c(opcode: int, *usage: int, sa: int | None = None) -> CommandInfo:
    return CommandInfo(opcode, sa, bytes((opcode, *usage)))


_F4 = (0xFF,) * 4
_F8 = (0xFF,) * 8
_RW10 = (0x1A, *_F4, 0x1F, 0xFF, 0xFF, 0x00)  # DPO FUA FUA_NV, LBA, group, length
_RW12 = (0x1A, *_F4, *_F4, 0x1F, 0x00)
_RW16 = (0x1A, *_F8, *_F4, 0x1F, 0x00)
_VERIFY10 = (0x16, *_F4, 0x1F, 0xFF, 0xFF, 0x00)  # DPO BYTCHK
_VERIFY12 = (0x16, *_F4, *_F4, 0x1F, 0x00)
_VERIFY16 = (0x16, *_F8, *_F4, 0x1F, 0x00)
_WAV10 = (0x12, *_F4, 0x1F, 0xFF, 0xFF, 0x00)  # DPO BYTCHK(01b)
_WAV12 = (0x12, *_F4, *_F4, 0x1F, 0x00)
_WAV16 = (0x12, *_F8, *_F4, 0x1F, 0x00)
_HASH_RANGE = (0xFF, *_F8, *_F4, 0x00, 0x00)  # ALGORITHM, LBA, blocks, reserved

COMMANDS: tuple[CommandInfo, ...] = (
    _c(op.TEST_UNIT_READY, 0, 0, 0, 0, 0),
    _c(op.REQUEST_SENSE, 0x01, 0, 0, 0xFF, 0),
    _c(op.READ_6, 0x1F, 0xFF, 0xFF, 0xFF, 0),
    _c(op.WRITE_6, 0x1F, 0xFF, 0xFF, 0xFF, 0),
    _c(op.INQUIRY, 0x01, 0xFF, 0xFF, 0xFF, 0),
    _c(op.MODE_SELECT_6, 0x11, 0, 0, 0xFF, 0),
    _c(op.RESERVE_6, 0, 0, 0, 0, 0),
    _c(op.RELEASE_6, 0, 0, 0, 0, 0),
    _c(op.MODE_SENSE_6, 0x08, 0xFF, 0xFF, 0xFF, 0),
    _c(op.START_STOP_UNIT, 0x01, 0, 0x0F, 0xF7, 0),
    _c(op.PREVENT_ALLOW_MEDIUM_REMOVAL, 0, 0, 0, 0x03, 0),
    _c(op.READ_CAPACITY_10, 0, *_F4, 0, 0, 0x01, 0),
    _c(op.READ_10, *_RW10),
    _c(op.WRITE_10, *_RW10),
    _c(op.WRITE_AND_VERIFY_10, *_WAV10),
    _c(op.VERIFY_10, *_VERIFY10),
    _c(op.PRE_FETCH_10, 0x02, *_F4, 0x1F, 0xFF, 0xFF, 0),
    _c(op.SYNCHRONIZE_CACHE_10, 0x02, *_F4, 0x1F, 0xFF, 0xFF, 0),
    _c(op.WRITE_SAME_10, 0x08, *_F4, 0x1F, 0xFF, 0xFF, 0),
    _c(op.UNMAP, 0, 0, 0, 0, 0, 0x1F, 0xFF, 0xFF, 0),
    _c(op.MODE_SELECT_10, 0x11, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0),
    _c(op.RESERVE_10, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    _c(op.RELEASE_10, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    _c(op.MODE_SENSE_10, 0x18, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0xFF, 0),
    *(_c(op.PERSISTENT_RESERVE_IN, 0x1F, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, sa=sa) for sa in range(4)),
    *(_c(op.PERSISTENT_RESERVE_OUT, 0x1F, 0xFF, 0, 0, *_F4, 0, sa=sa) for sa in range(7)),
    _c(op.READ_16, *_RW16),
    _c(op.COMPARE_AND_WRITE, 0x1A, *_F8, 0, 0, 0, 0xFF, 0x1F, 0),
    _c(op.WRITE_16, *_RW16),
    _c(op.ORWRITE_16, 0x18, *_F8, *_F4, 0x1F, 0),
    _c(op.WRITE_AND_VERIFY_16, *_WAV16),
    _c(op.VERIFY_16, *_VERIFY16),
    _c(op.PRE_FETCH_16, 0x02, *_F8, *_F4, 0x1F, 0),
    _c(op.SYNCHRONIZE_CACHE_16, 0x02, *_F8, *_F4, 0x1F, 0),
    _c(op.WRITE_SAME_16, 0x09, *_F8, *_F4, 0x1F, 0),
    _c(op.SERVICE_ACTION_IN_16, 0x1F, *(0,) * 8, *_F4, 0, 0, sa=op.SA_READ_CAPACITY_16),
    _c(op.SERVICE_ACTION_IN_16, 0x1F, *_F8, *_F4, 0, 0, sa=op.SA_GET_LBA_STATUS),
    _c(op.REPORT_LUNS, 0, 0xFF, 0, 0, 0, *_F4, 0, 0),
    _c(op.MAINTENANCE_IN, 0x1F, 0xE0, 0, 0, 0, *_F4, 0, 0, sa=op.SA_REPORT_TARGET_PORT_GROUPS),
    _c(
        op.MAINTENANCE_IN,
        0x1F,
        0x87,
        0xFF,
        0xFF,
        0xFF,
        *_F4,
        0,
        0,
        sa=op.SA_REPORT_SUPPORTED_OPCODES,
    ),
    _c(op.READ_12, *_RW12),
    _c(op.WRITE_12, *_RW12),
    _c(op.WRITE_AND_VERIFY_12, *_WAV12),
    _c(op.VERIFY_12, *_VERIFY12),
    _c(op.HASH_RANGE, *_HASH_RANGE),
)


def commands_for(thin: bool) -> tuple[CommandInfo, ...]:
    """The table of one logical unit: UNMAP only when it is thin provisioned."""
    return tuple(c for c in COMMANDS if thin or c.opcode != op.UNMAP)


def _timeouts() -> bytes:
    """Command timeouts descriptor (SPC-4 6.35.4), 12 bytes."""
    return (
        b"\x00\x0a\x00\x00"
        + NOMINAL_TIMEOUT.to_bytes(4, "big")
        + RECOMMENDED_TIMEOUT.to_bytes(4, "big")
    )


def _all_commands(table: tuple[CommandInfo, ...], rctd: bool) -> bytes:
    body = bytearray()
    for c in table:
        flags = (0x02 if rctd else 0) | (0x01 if c.service_action is not None else 0)
        body += bytes((c.opcode, 0)) + (c.service_action or 0).to_bytes(2, "big")
        body += bytes((0, flags)) + len(c.usage).to_bytes(2, "big")
        if rctd:
            body += _timeouts()
    return len(body).to_bytes(4, "big") + bytes(body)


def _one_command(
    table: tuple[CommandInfo, ...], options: int, opcode: int, action: int, rctd: bool
) -> bytes:
    """Reporting options 001b (by opcode), 010b (opcode + SA), 011b (either)."""
    with_sa = [c for c in table if c.opcode == opcode and c.service_action is not None]
    plain = [c for c in table if c.opcode == opcode and c.service_action is None]
    if options == 1 and with_sa:
        raise invalid_field_in_cdb(3)
    if options == 2 and plain:
        raise invalid_field_in_cdb(3)
    found = plain if options == 1 or (options == 3 and not with_sa) else with_sa
    match = next((c for c in found if c.service_action in (None, action)), None)
    if match is None:
        return bytes((0, NOT_SUPPORTED, 0, 0))
    head = bytes((0, (0x80 if rctd else 0) | SUPPORTED)) + len(match.usage).to_bytes(2, "big")
    return head + match.usage + (_timeouts() if rctd else b"")


async def report_supported_opcodes(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    cdb = cmd.cdb
    rctd, options = bool(cdb[2] & 0x80), cdb[2] & 0x07
    if options == 0:
        data = _all_commands(st.commands, rctd)
    elif options <= 3:
        data = _one_command(st.commands, options, cdb[3], u16(cdb, 4), rctd)
    else:
        raise invalid_field_in_cdb(2, 2)
    return ScsiResult(Status.GOOD, truncate(data, u32(cdb, 6)))
