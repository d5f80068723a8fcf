"""HASH RANGE: a vendor-specific command (operation code C1h) that hashes a range
of logical blocks on the target's own storage, so the copy engine can verify a
written extent without reading it back over the network.

CDB (16 bytes, all multi-byte fields big endian)::

    byte 0       OPERATION CODE (C1h)
    byte 1       ALGORITHM: 01h = XXH3-128 of the blocks as stored; 02h = RECEIPT,
                 03h = READ-BACK (below); any other value is INVALID FIELD IN CDB
                 (field pointer: byte 1)
    bytes 2-9    LOGICAL BLOCK ADDRESS
    bytes 10-13  NUMBER OF LOGICAL BLOCKS: 0 hashes nothing (the digest of empty
                 input); more than 64 MiB of data is INVALID FIELD IN CDB (byte 10)
    byte 14      reserved: nonzero is INVALID FIELD IN CDB (byte 14)
    byte 15      CONTROL

A range past the capacity is LOGICAL BLOCK ADDRESS OUT OF RANGE and an I/O error
MEDIUM ERROR / UNRECOVERED READ ERROR, as for READ. Algorithm 01h: Data-In is 16 bytes: the
XXH3-128 digest (canonical, big endian form) of the blocks as currently stored,
unwritten (thin) ranges reading as zeros. The backend reads the range back (with
O_DIRECT where the LU's I/O is direct: what the disk holds; through the page cache
where the LU's writes go) and hashes it in a worker thread, off the event loop. For
reservations it is a read: allowed wherever READ is.

Algorithm 02h reads nothing: when the range is tiled, in order, by the receipts of the
WRITE commands that last wrote it (see _receipts), Data-In is the XXH3-128 over their
16-byte digests concatenated (what :func:`receipt_digest` computes from the data and
the size of the commands); when some block of the range has no receipt, there is no
Data-In (GOOD, with the whole length as residual), and the initiator asks for 01h.
Asking arms the logical unit's receipts: the writes of the next minutes get them
(_receipts.RECEIPT_ARMED_S); a question over no blocks only arms.

Algorithm 03h reads nothing either: when an earlier 01h read back exactly this range
and no change has gone over any block of it since (nor was in flight while it read),
Data-In is the digest that 01h returned; otherwise there is no Data-In, as for 02h. A
copy verified by storage reads each extent back once, as it writes it, and asks 03h in
its final check of the whole range.
"""

from __future__ import annotations

import struct
from typing import Final

import xxhash

from ._cdb import HASH_RANGE
from ._disk import hash_blocks
from ._receipts import READ_BACK_MAX_BYTES
from ._sense import invalid_field_in_cdb
from ._state import LuState
from ._types import ScsiCommand, ScsiResult, Status

HASH_RANGE_OPCODE: Final = HASH_RANGE
ALG_XXH3_128: Final = 0x01
ALG_RECEIPT: Final = 0x02
ALG_READ_BACK: Final = 0x03
DIGEST_LENGTH: Final = 16
MAX_HASH_BYTES: Final = READ_BACK_MAX_BYTES

# (ALGORITHM, LOGICAL BLOCK ADDRESS, NUMBER OF LOGICAL BLOCKS, reserved byte 14).
_LAYOUT: Final = struct.Struct(">xBQIBx")


async def hash_range(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    algorithm, lba, blocks, reserved = _LAYOUT.unpack_from(cmd.cdb)
    if algorithm not in (ALG_XXH3_128, ALG_RECEIPT, ALG_READ_BACK):
        raise invalid_field_in_cdb(1)
    if reserved:
        raise invalid_field_in_cdb(14)
    st.check_range(lba, blocks)
    bs = st.block_size
    if blocks * bs > MAX_HASH_BYTES:
        raise invalid_field_in_cdb(10)
    if algorithm == ALG_RECEIPT:
        st.receipts.arm()  # the writes from now on get receipts (see _receipts)
        return ScsiResult(Status.GOOD, st.receipts.digest_of(lba, blocks) or b"")
    if algorithm == ALG_READ_BACK:
        return ScsiResult(Status.GOOD, st.receipts.read_back(lba, blocks) or b"")
    return ScsiResult(Status.GOOD, await _digest(st, lba, blocks))


async def _digest(st: LuState, lba: int, blocks: int) -> bytes:
    """The blocks' digest read back from storage, kept for 03h (see _receipts)."""
    digest = xxhash.xxh3_128()
    if not blocks:
        return digest.digest()
    reading = st.receipts.begin_read(lba, blocks)
    answer: bytes | None = None
    try:
        await hash_blocks(st, lba, blocks, digest)
        answer = digest.digest()
    finally:
        st.receipts.end_read(reading, answer)
    return answer
