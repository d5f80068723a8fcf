"""Destination-side verification: the builtin target's vendor-specific HASH RANGE.

The target hashes a block range on its own storage and returns the 16-byte
XXH3-128 digest, so a copy can verify an extent without reading it back over
the network.  A vendor-specific opcode means something else on another vendor's
target, so it is used only where the standard INQUIRY names our vendor *and*
REPORT SUPPORTED OPERATION CODES says the opcode is supported.
"""

from __future__ import annotations

import asyncio

from reservoir.agent.initiator._commands import hash_range16, inquiry, report_one_opcode
from reservoir.agent.initiator._errors import ProtocolError, ScsiError
from reservoir.agent.initiator._session import Session
from reservoir.agent.scsi import ALG_READ_BACK, ALG_RECEIPT, HASH_RANGE_OPCODE

VENDOR = b"RESERVOR"
SUPPORTED = 0b011  # SPC-4 Table 305: supported, in conformance with a standard (or vendor)


async def supports_hash_range(session: Session, lun: int) -> bool:
    """Whether ``lun`` is served by our target with HASH RANGE available. Both
    questions are asked at once (one round trip, not two, before a copy's first
    write); REPORT SUPPORTED OPERATION CODES only asks, so asking another vendor's
    target is harmless, and its answer counts only where the vendor is ours."""
    ident, reply = await asyncio.gather(
        session.scsi(lun, inquiry(), read_length=96),
        session.scsi(lun, report_one_opcode(HASH_RANGE_OPCODE), read_length=64),
        return_exceptions=True,
    )
    for answer in (ident, reply):
        if isinstance(answer, BaseException) and not isinstance(answer, ScsiError):
            raise answer
    if isinstance(ident, BaseException) or ident.data[8:16] != VENDOR:
        return False
    if isinstance(reply, BaseException):
        return False
    return len(reply.data) >= 2 and reply.data[1] & 0x07 == SUPPORTED


async def hash_range(session: Session, lun: int, lba: int, blocks: int) -> bytes:
    """The target's XXH3-128 digest (big-endian, as ``xxh3_128().digest()``) of the range."""
    reply = await session.scsi(lun, hash_range16(lba, blocks), read_length=16)
    if len(reply.data) != 16:
        raise ProtocolError(f"HASH RANGE returned {len(reply.data)} bytes, not 16")
    return reply.data


async def arm_receipts(session: Session, lun: int) -> bool:
    """Asks our target to keep receipts of the writes that follow (HASH RANGE algorithm
    02h over no blocks: it records them only while they are asked about); whether it
    does (a target of ours from before receipts refuses the algorithm)."""
    try:
        await session.scsi(lun, hash_range16(0, 0, ALG_RECEIPT), read_length=16)
    except ScsiError:
        return False
    return True


async def hash_receipts(session: Session, lun: int, lba: int, blocks: int) -> bytes | None:
    """The target's digest of its receipts for the range (HASH RANGE algorithm 02h:
    what the writes that last wrote it received); None where some block has none."""
    return await _kept_digest(session, lun, lba, blocks, algorithm=ALG_RECEIPT, what="receipt")


async def hash_read_back(session: Session, lun: int, lba: int, blocks: int) -> bytes | None:
    """The digest an earlier HASH RANGE 01h read back from storage over exactly the
    range, where no change went over it since (algorithm 03h: nothing is read now);
    None where the target kept none."""
    return await _kept_digest(session, lun, lba, blocks, algorithm=ALG_READ_BACK, what="read-back")


async def _kept_digest(
    session: Session, lun: int, lba: int, blocks: int, *, algorithm: int, what: str
) -> bytes | None:
    """A digest the target kept (algorithm 02h or 03h), or None where it has none."""
    reply = await session.scsi(lun, hash_range16(lba, blocks, algorithm), read_length=16)
    if not reply.data:
        return None
    if len(reply.data) != 16:
        raise ProtocolError(f"HASH RANGE ({what}) returned {len(reply.data)} bytes, not 16")
    return reply.data
