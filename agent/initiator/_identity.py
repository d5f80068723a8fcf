"""Which device a LUN is: its logical unit designator from the Device Identification
VPD page (INQUIRY EVPD 0x83, SPC-4 7.8.6); and, on our target, its change mark (the
vendor page C0h of reservoir.agent.scsi._change_mark).

Two URLs may name one LUN (``127.0.0.1`` and ``localhost``, LUN ``0`` and ``00``,
two portals of one target); the designator does not depend on the spelling. The
designator kept is the LU's (association 0) of the best kind: NAA, then EUI-64, then
a SCSI name string, then T10 vendor ID; it is spelled ``naa.<hex>``, ``eui.<hex>``,
``name.<text>`` or ``t10.<hex>``.
"""

from __future__ import annotations

import struct

from reservoir.agent.initiator._errors import ProtocolError, ScsiError
from reservoir.agent.initiator._session import Session
from reservoir.agent.scsi import CHANGE_MARK_PAGE, decode_change_mark

__all__ = ["change_mark", "device_designator", "parse_device_identification"]

ILLEGAL_REQUEST = 0x5

VPD_DEVICE_IDENTIFICATION = 0x83
PAGE_LENGTH = 1024
# designator type -> (preference, prefix): smaller is better
_KINDS = {0x3: (0, "naa"), 0x2: (1, "eui"), 0x8: (2, "name"), 0x1: (3, "t10")}


def inquiry_vpd(page: int, length: int = PAGE_LENGTH) -> bytes:
    """INQUIRY with EVPD=1 for ``page`` (SPC-4 6.6)."""
    return struct.pack(">BBBHB", 0x12, 0x01, page, length, 0)


def parse_device_identification(page: bytes) -> str | None:
    """The LU's designator of the best kind in a 0x83 page, or None if it has none."""
    if len(page) < 4 or page[1] != VPD_DEVICE_IDENTIFICATION:
        raise ProtocolError("INQUIRY VPD 0x83 answered with another page")
    end = min(len(page), 4 + int.from_bytes(page[2:4], "big"))
    best: tuple[int, str] | None = None
    at = 4
    while at + 4 <= end:
        kind, association = page[at + 1] & 0x0F, (page[at + 1] >> 4) & 0x3
        value = page[at + 4 : at + 4 + page[at + 3]]
        at += 4 + page[at + 3]
        if association != 0 or kind not in _KINDS:
            continue
        rank, prefix = _KINDS[kind]
        text = value.rstrip(b"\0").decode("utf-8", "replace") if kind == 0x8 else value.hex()
        if best is None or rank < best[0]:
            best = (rank, f"{prefix}.{text}")
    return None if best is None else best[1]


async def device_designator(session: Session, lun: int) -> str | None:
    """The LUN's designator (see the module); None where the target gives none."""
    reply = await session.scsi(lun, inquiry_vpd(VPD_DEVICE_IDENTIFICATION), read_length=PAGE_LENGTH)
    return parse_device_identification(reply.data)


async def change_mark(session: Session, lun: int) -> tuple[str, str] | None:
    """The LUN's change mark, (how, state); None where the target keeps none (another
    vendor's target refuses the page, or answers one that is not ours). INQUIRY only
    asks: asking any target is harmless."""
    try:
        reply = await session.scsi(lun, inquiry_vpd(CHANGE_MARK_PAGE), read_length=PAGE_LENGTH)
    except ScsiError as exc:
        if exc.sense_key == ILLEGAL_REQUEST:
            return None
        raise
    return decode_change_mark(reply.data)


MODE_SENSE_6, ALL_PAGES, WP = 0x1A, 0x3F, 0x80


async def write_protected(session: Session, lun: int) -> bool:
    """Whether the LUN is write-protected (the WP bit of MODE SENSE's header, SBC-4
    6.5.1): a target that exports it read-only says so. False where the target does
    not answer MODE SENSE (a write then finds out)."""
    cdb = struct.pack(">BBBBBB", MODE_SENSE_6, 0x08, ALL_PAGES, 0, 4, 0)  # DBD, header only
    try:
        reply = await session.scsi(lun, cdb, read_length=4)
    except ScsiError as exc:
        if exc.sense_key == ILLEGAL_REQUEST:
            return False
        raise
    return len(reply.data) >= 3 and bool(reply.data[2] & WP)
