"""How many Data-Out bytes a CDB describes, for the transport's write residuals.

RFC 7143 11.4.5.2: the residual of a write is the difference between the
Expected Data Transfer Length and the amount the SCSI command actually wanted,
which only the CDB says (in blocks, in a parameter list length, ...).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from . import _cdb as op
from ._cdb import RW10, RW12, RW16, decode_rw6, u16, u32

LengthOf = Callable[[bytes, int], int]


def _blocks6(cdb: bytes, bs: int) -> int:
    return decode_rw6(cdb)[1] * bs


def _blocks10(cdb: bytes, bs: int) -> int:
    return int(RW10.unpack_from(cdb)[2]) * bs


def _blocks12(cdb: bytes, bs: int) -> int:
    return int(RW12.unpack_from(cdb)[2]) * bs


def _blocks16(cdb: bytes, bs: int) -> int:
    return int(RW16.unpack_from(cdb)[2]) * bs


def _verify(blocks_of: LengthOf) -> LengthOf:
    """VERIFY sends data only with BYTCHK: 01b all blocks, 11b a single block."""

    def length(cdb: bytes, bs: int) -> int:
        bytchk = (cdb[1] >> 1) & 0x03
        total = blocks_of(cdb, bs)
        if bytchk == 1:
            return total
        return min(total, bs) if bytchk == 3 else 0

    return length


_LENGTHS: dict[int, LengthOf] = {
    op.WRITE_6: _blocks6,
    op.WRITE_10: _blocks10,
    op.WRITE_12: _blocks12,
    op.WRITE_16: _blocks16,
    op.WRITE_AND_VERIFY_10: _blocks10,
    op.WRITE_AND_VERIFY_12: _blocks12,
    op.WRITE_AND_VERIFY_16: _blocks16,
    op.ORWRITE_16: _blocks16,
    op.VERIFY_10: _verify(_blocks10),
    op.VERIFY_12: _verify(_blocks12),
    op.VERIFY_16: _verify(_blocks16),
    op.COMPARE_AND_WRITE: lambda cdb, bs: 2 * cdb[13] * bs,
    op.WRITE_SAME_10: lambda cdb, bs: bs,
    op.WRITE_SAME_16: lambda cdb, bs: 0 if cdb[1] & 0x01 else bs,
    op.UNMAP: lambda cdb, bs: u16(cdb, 7),
    op.MODE_SELECT_6: lambda cdb, bs: cdb[4],
    op.MODE_SELECT_10: lambda cdb, bs: u16(cdb, 7),
    op.PERSISTENT_RESERVE_OUT: lambda cdb, bs: u32(cdb, 5),
}


def data_out_length(cdb: bytes, block_size: int) -> int:
    """Bytes of Data-Out ``cdb`` asks for; 0 for commands without Data-Out or
    CDBs too short to say."""
    if not cdb:
        return 0
    length_of = _LENGTHS.get(cdb[0])
    if length_of is None:
        return 0
    try:
        return length_of(cdb, block_size)
    except (IndexError, struct.error):
        return 0
