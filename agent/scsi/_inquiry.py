"""INQUIRY (SPC-4 6.6), its VPD pages (SPC-4 7.8, SBC-3 6.6) and REPORT TARGET
PORT GROUPS (SPC-4 6.36)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ._cdb import truncate, u16, u32
from ._change_mark import CHANGE_MARK_PAGE, encode_change_mark
from ._sense import invalid_field_in_cdb
from ._state import MAX_UNMAP_DESCRIPTORS, UNLIMITED, Identity, LuState
from ._types import Nexus, ScsiCommand, ScsiResult, Status

DIRECT_ACCESS_BLOCK_DEVICE = 0x00
NO_DEVICE = 0x7F  # peripheral qualifier 011b, device type 1Fh
TARGET_PORT_GROUP = 1
VERSION_SPC4 = 0x06
# Version descriptors (SPC-4 table 141): SAM-5, SPC-4, SBC-3, iSCSI.
VERSION_DESCRIPTORS = (0x00A0, 0x0460, 0x04C0, 0x0960)
PROTOCOL_ISCSI = 0x5

VpdBuilder = Callable[[LuState, Nexus], bytes]


class ChangeMarkLike(Protocol):
    """What a backend's change_mark() returns (reservoir.agent.storage.ChangeMark)."""

    @property
    def how(self) -> str: ...

    @property
    def state(self) -> str: ...


def _ascii(text: str, width: int) -> bytes:
    """Left-aligned, space-padded ASCII (SPC-4 4.4.1: 20h-7Eh only)."""
    raw = bytes(c if 0x20 <= c <= 0x7E else 0x20 for c in text.encode("ascii", "replace"))
    return raw[:width].ljust(width, b" ")


def standard_inquiry(identity: Identity, peripheral: int = DIRECT_ACCESS_BLOCK_DEVICE) -> bytes:
    """Standard INQUIRY data (SPC-4 6.6.2): SPC-4, HiSup, CmdQue, implicit ALUA."""
    data = bytearray(96)
    data[0] = peripheral
    data[2] = VERSION_SPC4
    data[3] = 0x12  # HISUP, response data format 2
    data[4] = len(data) - 5
    data[5] = 0x10  # TPGS = 01b: implicit asymmetric logical unit access
    data[7] = 0x02  # CMDQUE
    data[8:16] = _ascii(identity.vendor, 8)
    data[16:32] = _ascii(identity.product, 16)
    data[32:36] = _ascii(identity.revision, 4)
    for i, descriptor in enumerate(VERSION_DESCRIPTORS):
        data[58 + 2 * i : 60 + 2 * i] = descriptor.to_bytes(2, "big")
    return bytes(data)


def _vpd(page: int, payload: bytes | bytearray, peripheral: int = 0) -> bytes:
    return bytes((peripheral, page)) + len(payload).to_bytes(2, "big") + bytes(payload)


def _supported_pages(st: LuState, nexus: Nexus) -> bytes:
    pages = [0x00, 0x80, 0x83, 0xB0, 0xB1]
    if st.thin:
        pages.append(0xB2)
    if _marker(st) is not None:
        pages.append(CHANGE_MARK_PAGE)
    return _vpd(0x00, bytes(pages))


def _marker(st: LuState) -> Callable[[], ChangeMarkLike] | None:
    """The backend's change mark, where it keeps one (our storage engine's volumes)."""
    marker: Callable[[], ChangeMarkLike] | None = getattr(st.backend, "change_mark", None)
    return marker


def _change_mark(st: LuState, nexus: Nexus) -> bytes:
    """The Reservoir change mark page (vendor specific, see _change_mark)."""
    marker = _marker(st)
    assert marker is not None  # offered only then (inquiry)
    mark = marker()
    return _vpd(CHANGE_MARK_PAGE, encode_change_mark(mark.how, mark.state))


def _unit_serial(st: LuState, nexus: Nexus) -> bytes:
    return _vpd(0x80, st.identity.serial.encode("ascii", "replace"))


def _designator(
    code_set: int, kind: int, value: bytes, *, assoc: int = 0, piv: bool = False
) -> bytes:
    """One identification descriptor (SPC-4 7.8.6.1)."""
    first = code_set | ((PROTOCOL_ISCSI << 4) if piv else 0)
    second = (0x80 if piv else 0) | (assoc << 4) | kind
    return bytes((first, second, 0, len(value))) + value


def _name_string(name: str) -> bytes:
    """SCSI name string: UTF-8, NUL terminated, padded to a multiple of four."""
    raw = name.encode("utf-8") + b"\x00"
    return raw.ljust(-(-len(raw) // 4) * 4, b"\x00")


def _device_identification(st: LuState, nexus: Nexus) -> bytes:
    """Device Identification VPD page (SPC-4 7.8.6)."""
    ident = st.identity
    port = st.port_of(nexus)
    target_port = f"{ident.target_name},t,0x{port:04x}"
    payload = b"".join(
        (
            _designator(0x1, 0x3, ident.naa),
            _designator(
                0x2, 0x1, _ascii(ident.vendor, 8) + ident.serial.encode("ascii", "replace")
            ),
            _designator(0x3, 0x8, _name_string(ident.target_name), assoc=2, piv=True),
            _designator(0x3, 0x8, _name_string(target_port), assoc=1, piv=True),
            _designator(0x1, 0x4, port.to_bytes(4, "big"), assoc=1, piv=True),
            _designator(0x1, 0x5, TARGET_PORT_GROUP.to_bytes(4, "big"), assoc=1, piv=True),
        )
    )
    return _vpd(0x83, payload)


def _block_limits(st: LuState, nexus: Nexus) -> bytes:
    """Block Limits VPD page (SBC-3 6.6.4), page length 3Ch."""
    page = bytearray(60)
    page[0] = 0x01  # WSNZ: WRITE SAME with zero blocks is not supported
    page[1] = st.max_compare_and_write
    page[2:4] = st.granularity.to_bytes(2, "big")
    page[4:8] = st.max_transfer.to_bytes(4, "big")
    page[8:12] = st.optimal_transfer.to_bytes(4, "big")
    page[12:16] = st.max_transfer.to_bytes(4, "big")
    if st.thin:
        page[16:20] = UNLIMITED.to_bytes(4, "big")
        page[20:24] = MAX_UNMAP_DESCRIPTORS.to_bytes(4, "big")
        page[24:28] = st.granularity.to_bytes(4, "big")
        page[28:32] = (0x80000000).to_bytes(4, "big")  # UGAVALID, alignment 0
    page[32:40] = st.max_write_same.to_bytes(8, "big")
    return _vpd(0xB0, page)


def _block_device_characteristics(st: LuState, nexus: Nexus) -> bytes:
    """Block Device Characteristics VPD page (SBC-3 6.6.2): non-rotating medium."""
    page = bytearray(60)
    page[0:2] = (1).to_bytes(2, "big")
    return _vpd(0xB1, page)


def _logical_block_provisioning(st: LuState, nexus: Nexus) -> bytes:
    """Logical Block Provisioning VPD page (SBC-3 6.6.5): LBPU, LBPWS, LBPWS10, LBPRZ."""
    return _vpd(0xB2, bytes((0, 0xE4, 0x02, 0)))


VPD_PAGES: dict[int, VpdBuilder] = {
    0x00: _supported_pages,
    0x80: _unit_serial,
    0x83: _device_identification,
    0xB0: _block_limits,
    0xB1: _block_device_characteristics,
    0xB2: _logical_block_provisioning,
    CHANGE_MARK_PAGE: _change_mark,
}


async def inquiry(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """INQUIRY: standard data or a VPD page, cut to the 16-bit allocation length."""
    cdb = cmd.cdb
    if cdb[1] & 0xFE:
        raise invalid_field_in_cdb(1)
    page, alloc = cdb[2], u16(cdb, 3)
    if not cdb[1] & 0x01:
        if page:
            raise invalid_field_in_cdb(2)
        return ScsiResult(Status.GOOD, truncate(standard_inquiry(st.identity), alloc))
    builder = VPD_PAGES.get(page)
    if builder is None or (page == 0xB2 and not st.thin):
        raise invalid_field_in_cdb(2)
    if page == CHANGE_MARK_PAGE and _marker(st) is None:
        raise invalid_field_in_cdb(2)
    return ScsiResult(Status.GOOD, truncate(builder(st, cmd.nexus), alloc))


def absent_lun_inquiry(identity: Identity, cdb: bytes) -> ScsiResult:
    """INQUIRY to a LUN with no logical unit: peripheral qualifier 011b (SPC-4 6.6.2)."""
    alloc = u16(cdb, 3)
    evpd = cdb[1] & 0x01
    data = bytes((NO_DEVICE, cdb[2], 0, 0)) if evpd else standard_inquiry(identity, NO_DEVICE)
    return ScsiResult(Status.GOOD, truncate(data, alloc))


async def report_target_port_groups(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """REPORT TARGET PORT GROUPS: one group, active/optimized, every port seen."""
    cdb = cmd.cdb
    extended = (cdb[1] >> 5) == 1
    if (cdb[1] >> 5) > 1:
        raise invalid_field_in_cdb(1, 7)
    st.port_of(cmd.nexus)
    ports = sorted(st.ports)
    group = bytearray((0x80, 0x01, 0, TARGET_PORT_GROUP, 0, 0, 0, len(ports)))
    for port in ports:
        group += b"\x00\x00" + port.to_bytes(2, "big")
    extra = b"\x10\x00\x00\x00" if extended else b""
    header = (len(group) + len(extra)).to_bytes(4, "big") + extra
    return ScsiResult(Status.GOOD, truncate(header + bytes(group), u32(cdb, 6)))
