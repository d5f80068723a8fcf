"""Receipts (HASH RANGE algorithm 02h): what the writes that last wrote a range received."""

from __future__ import annotations

import errno
import struct

import xxhash
from test_scsi_support import (
    MemoryBackend,
    assert_good,
    execute,
    make_lu,
    unmap_cdb,
    unmap_list,
    write16,
)

from reservoir.agent.scsi import ALG_RECEIPT, HASH_RANGE_OPCODE, LogicalUnit, receipt_digest
from reservoir.agent.scsi._receipts import RECEIPT_ARMED_S, Receipts

BS = 512
PIECE = 64 << 10  # the smallest write that gets a receipt
PIECE_BLOCKS = PIECE // BS


def receipt_cdb(lba: int, blocks: int) -> bytes:
    return struct.pack(">BBQIBB", HASH_RANGE_OPCODE, ALG_RECEIPT, lba, blocks, 0, 0)


def pieces(count: int, seed: int = 1) -> bytes:
    return bytes((i * 31 + seed) % 251 for i in range(count * PIECE))


def armed_lu() -> tuple[LogicalUnit, MemoryBackend]:
    """A logical unit asked about receipts (over no blocks), as a copy does first."""
    lu, backend = make_lu()
    asked = execute(lu, receipt_cdb(0, 0))
    assert_good(asked)
    assert asked.data_in == xxhash.xxh3_128_digest(b"")  # no blocks: the empty digest
    return lu, backend


def test_the_receipt_of_a_range_written_in_pieces_is_the_digest_of_their_digests() -> None:
    lu, _ = armed_lu()
    data = pieces(3)
    for i in range(3):
        chunk = data[i * PIECE : (i + 1) * PIECE]
        assert_good(execute(lu, write16(i * PIECE_BLOCKS, PIECE_BLOCKS), chunk))
    result = execute(lu, receipt_cdb(0, 3 * PIECE_BLOCKS))
    assert_good(result)
    assert result.data_in == receipt_digest(data, PIECE)
    assert result.data_in != xxhash.xxh3_128_digest(data)  # not the storage digest


def test_a_receipt_asked_with_other_boundaries_or_over_unwritten_blocks_is_no_data() -> None:
    lu, _ = armed_lu()
    assert_good(execute(lu, write16(0, PIECE_BLOCKS), pieces(1)))
    assert execute(lu, receipt_cdb(0, PIECE_BLOCKS // 2)).data_in == b""  # crosses its end
    assert execute(lu, receipt_cdb(0, 2 * PIECE_BLOCKS)).data_in == b""  # unwritten after
    assert execute(lu, receipt_cdb(1, PIECE_BLOCKS)).data_in == b""  # not at a start


def test_any_later_change_overlapping_a_receipt_drops_it() -> None:
    lu, _ = armed_lu()
    assert_good(execute(lu, write16(0, PIECE_BLOCKS), pieces(1)))
    assert_good(execute(lu, write16(PIECE_BLOCKS, PIECE_BLOCKS), pieces(1, seed=2)))
    assert_good(execute(lu, write16(PIECE_BLOCKS - 1, 1), b"x" * BS))  # one block, no receipt
    assert execute(lu, receipt_cdb(0, PIECE_BLOCKS)).data_in == b""
    assert execute(lu, receipt_cdb(PIECE_BLOCKS, PIECE_BLOCKS)).data_in != b""
    assert_good(execute(lu, unmap_cdb(24), unmap_list((PIECE_BLOCKS + 5, 1))))
    assert execute(lu, receipt_cdb(PIECE_BLOCKS, PIECE_BLOCKS)).data_in == b""


def test_a_write_the_storage_failed_leaves_no_receipt() -> None:
    lu, backend = armed_lu()
    assert_good(execute(lu, write16(0, PIECE_BLOCKS), pieces(1)))
    assert execute(lu, receipt_cdb(0, PIECE_BLOCKS)).data_in != b""
    backend.fail["write"] = OSError(errno.EIO, "medium error")
    execute(lu, write16(0, PIECE_BLOCKS), pieces(1, seed=3))
    assert execute(lu, receipt_cdb(0, PIECE_BLOCKS)).data_in == b""


def armed(receipts: Receipts) -> Receipts:
    receipts.arm()
    return receipts


def test_overlapping_changes_in_flight_together_record_no_receipt() -> None:
    receipts = armed(Receipts(BS))
    first = receipts.begin(0, PIECE_BLOCKS)
    second = receipts.begin(10, 1)  # which reaches the storage last is unknown
    receipts.end(second)
    receipts.end(first, pieces(1))
    assert receipts.digest_of(0, PIECE_BLOCKS) is None
    apart = receipts.begin(PIECE_BLOCKS, PIECE_BLOCKS)
    other = receipts.begin(0, PIECE_BLOCKS)  # not overlapping: both recorded
    receipts.end(apart, pieces(1))
    receipts.end(other, pieces(1))
    assert len(receipts) == 2


def test_the_oldest_receipts_go_first_beyond_the_limit() -> None:
    receipts = armed(Receipts(BS, limit=3))
    for i in range(5):
        receipts.end(receipts.begin(i * PIECE_BLOCKS, PIECE_BLOCKS), pieces(1, seed=i))
    assert len(receipts) == 3
    assert receipts.digest_of(0, PIECE_BLOCKS) is None
    assert receipts.digest_of(4 * PIECE_BLOCKS, PIECE_BLOCKS) is not None


def test_writes_outside_the_receipt_sizes_get_none() -> None:
    receipts = armed(Receipts(BS))
    assert not receipts.wants(PIECE - BS) and receipts.wants(PIECE)
    assert receipts.wants(4 << 20) and not receipts.wants((4 << 20) + BS)


def test_writes_get_no_receipt_until_someone_asks_about_receipts() -> None:
    lu, _ = make_lu()
    assert_good(execute(lu, write16(0, PIECE_BLOCKS), pieces(1)))  # nobody asked yet
    assert execute(lu, receipt_cdb(0, PIECE_BLOCKS)).data_in == b""  # ... now armed
    assert_good(execute(lu, write16(0, PIECE_BLOCKS), pieces(1, seed=4)))
    assert execute(lu, receipt_cdb(0, PIECE_BLOCKS)).data_in == receipt_digest(
        pieces(1, seed=4), PIECE
    )


def test_receipts_stop_being_recorded_when_nobody_has_asked_for_a_while() -> None:
    now = [0.0]
    receipts = Receipts(BS, clock=lambda: now[0])
    assert not receipts.wants(PIECE)
    receipts.arm()
    now[0] = RECEIPT_ARMED_S - 1
    assert receipts.wants(PIECE)
    now[0] = RECEIPT_ARMED_S + 1
    assert not receipts.wants(PIECE)
    change = receipts.begin(0, PIECE_BLOCKS)  # unarmed, a change still drops receipts
    receipts.end(change, None)
    assert len(receipts) == 0
