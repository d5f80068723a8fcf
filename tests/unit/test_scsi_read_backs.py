"""Read-backs (HASH RANGE algorithm 03h): the digest an earlier 01h read back from
storage over exactly a range, while no change has gone over it since."""

from __future__ import annotations

import errno
import struct

import xxhash
from test_scsi_support import assert_good, execute, make_lu, unmap_cdb, unmap_list, write16

from reservoir.agent.scsi import ALG_READ_BACK, ALG_XXH3_128, HASH_RANGE_OPCODE
from reservoir.agent.scsi._receipts import Receipts

BS = 512
PIECE_BLOCKS = 128  # 64 KiB
DIGEST = b"d" * 16


def hash_cdb(lba: int, blocks: int, algorithm: int) -> bytes:
    return struct.pack(">BBQIBB", HASH_RANGE_OPCODE, algorithm, lba, blocks, 0, 0)


def data(blocks: int, seed: int = 1) -> bytes:
    return bytes((i * 31 + seed) % 251 for i in range(blocks * BS))


def test_a_range_read_back_answers_03h_with_the_digest_01h_gave_without_reading_again() -> None:
    lu, backend = make_lu()
    written = data(2 * PIECE_BLOCKS)
    assert_good(execute(lu, write16(0, 2 * PIECE_BLOCKS), written))
    assert execute(lu, hash_cdb(0, 2 * PIECE_BLOCKS, ALG_READ_BACK)).data_in == b""  # not yet
    stored = execute(lu, hash_cdb(0, 2 * PIECE_BLOCKS, ALG_XXH3_128)).data_in
    assert stored == xxhash.xxh3_128_digest(written)
    backend.calls.clear()
    result = execute(lu, hash_cdb(0, 2 * PIECE_BLOCKS, ALG_READ_BACK))
    assert_good(result)
    assert result.data_in == stored
    assert backend.calls == []  # nothing read


def test_a_read_back_answers_only_for_exactly_its_range() -> None:
    lu, _ = make_lu()
    assert_good(execute(lu, write16(0, 2 * PIECE_BLOCKS), data(2 * PIECE_BLOCKS)))
    assert_good(execute(lu, hash_cdb(0, 2 * PIECE_BLOCKS, ALG_XXH3_128)))
    assert execute(lu, hash_cdb(0, PIECE_BLOCKS, ALG_READ_BACK)).data_in == b""
    assert execute(lu, hash_cdb(0, 3 * PIECE_BLOCKS, ALG_READ_BACK)).data_in == b""
    assert execute(lu, hash_cdb(1, 2 * PIECE_BLOCKS - 1, ALG_READ_BACK)).data_in == b""


def test_any_later_change_over_a_read_back_drops_it_and_one_beside_it_does_not() -> None:
    lu, _ = make_lu()
    assert_good(execute(lu, write16(0, 3 * PIECE_BLOCKS), data(3 * PIECE_BLOCKS)))
    for first in (0, PIECE_BLOCKS):
        assert_good(execute(lu, hash_cdb(first, PIECE_BLOCKS, ALG_XXH3_128)))
    assert_good(execute(lu, write16(2 * PIECE_BLOCKS, 1), b"x" * BS))  # beside both
    assert execute(lu, hash_cdb(0, PIECE_BLOCKS, ALG_READ_BACK)).data_in != b""
    assert execute(lu, hash_cdb(PIECE_BLOCKS, PIECE_BLOCKS, ALG_READ_BACK)).data_in != b""
    assert_good(execute(lu, write16(PIECE_BLOCKS - 1, 1), b"y" * BS))  # last block of one
    assert execute(lu, hash_cdb(0, PIECE_BLOCKS, ALG_READ_BACK)).data_in == b""
    assert_good(execute(lu, unmap_cdb(24), unmap_list((PIECE_BLOCKS + 5, 1))))
    assert execute(lu, hash_cdb(PIECE_BLOCKS, PIECE_BLOCKS, ALG_READ_BACK)).data_in == b""


def test_a_read_back_the_storage_failed_keeps_nothing() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, write16(0, PIECE_BLOCKS), data(PIECE_BLOCKS)))
    backend.fail["read"] = OSError(errno.EIO, "medium error")
    failed = execute(lu, hash_cdb(0, PIECE_BLOCKS, ALG_XXH3_128))
    assert failed.status != 0
    del backend.fail["read"]
    assert execute(lu, hash_cdb(0, PIECE_BLOCKS, ALG_READ_BACK)).data_in == b""


def test_a_read_back_with_a_change_over_it_in_flight_keeps_nothing() -> None:
    receipts = Receipts(BS)
    write = receipts.begin(10, 1)  # the read may see it or not
    before = receipts.begin_read(0, PIECE_BLOCKS)
    receipts.end(write)
    receipts.end_read(before, DIGEST)
    assert receipts.read_back(0, PIECE_BLOCKS) is None
    reading = receipts.begin_read(0, PIECE_BLOCKS)
    during = receipts.begin(PIECE_BLOCKS - 1, 1)  # begins while it reads
    receipts.end(during)
    receipts.end_read(reading, DIGEST)
    assert receipts.read_back(0, PIECE_BLOCKS) is None
    apart = receipts.begin(PIECE_BLOCKS, 1)  # not over it: kept
    alone = receipts.begin_read(0, PIECE_BLOCKS)
    receipts.end_read(alone, DIGEST)
    receipts.end(apart)
    assert receipts.read_back(0, PIECE_BLOCKS) == DIGEST


def test_a_read_back_in_flight_spoils_no_write_receipt() -> None:
    receipts = Receipts(BS)
    receipts.arm()
    reading = receipts.begin_read(0, PIECE_BLOCKS)
    write = receipts.begin(0, PIECE_BLOCKS)
    payload = data(PIECE_BLOCKS)
    receipts.end(write, payload)
    receipts.end_read(reading, DIGEST)
    assert receipts.digest_of(0, PIECE_BLOCKS) == xxhash.xxh3_128_digest(
        xxhash.xxh3_128_digest(payload)
    )
    assert receipts.read_back(0, PIECE_BLOCKS) is None


def test_a_read_back_of_the_same_range_again_replaces_the_one_kept() -> None:
    receipts = Receipts(BS, limit=2)
    for digest in (b"a" * 16, b"b" * 16, b"c" * 16):
        receipts.end_read(receipts.begin_read(0, PIECE_BLOCKS), digest)
    assert receipts.read_back(0, PIECE_BLOCKS) == b"c" * 16
    for i in range(1, 3):
        receipts.end_read(receipts.begin_read(i * PIECE_BLOCKS, PIECE_BLOCKS), DIGEST)
    assert receipts.read_back(0, PIECE_BLOCKS) is None  # the oldest, beyond the limit
    assert receipts.read_back(2 * PIECE_BLOCKS, PIECE_BLOCKS) == DIGEST
