"""HASH RANGE (vendor specific C1h): the digest of an LBA range on the LU's storage."""

from __future__ import annotations

import errno
import struct

import xxhash
from test_scsi_support import (
    NEXUS_A,
    NEXUS_B,
    assert_good,
    execute,
    make_lu,
    prout,
    sense_of,
    write16,
)

from reservoir.agent.scsi import (
    ALG_XXH3_128,
    HASH_RANGE_OPCODE,
    LogicalUnit,
    Nexus,
    Status,
    sense_information,
)

BS = 512
REGISTER_AND_IGNORE, RESERVE = 6, 1
WRITE_EXCLUSIVE, EXCLUSIVE_ACCESS = 1, 3


def hash_range(lba: int, blocks: int, algorithm: int = ALG_XXH3_128, reserved: int = 0) -> bytes:
    return struct.pack(">BBQIBB", HASH_RANGE_OPCODE, algorithm, lba, blocks, reserved, 0)


def rsoc_one(opcode: int) -> bytes:
    return struct.pack(">BBBBHIxx", 0xA3, 0x0C, 0x01, opcode, 0, 65535)


def rsoc_all() -> bytes:
    return struct.pack(">BBBBHIxx", 0xA3, 0x0C, 0x00, 0, 0, 65535)


def field_pointer(sense: bytes) -> int:
    """The byte a fixed format sense's field pointer (SKSV, C/D set) names."""
    assert sense[15] & 0xC0 == 0xC0, sense.hex()
    return int.from_bytes(sense[16:18], "big")


def reserve(lu: LogicalUnit, holder: Nexus, pr_type: int) -> None:
    cdb, data = prout(REGISTER_AND_IGNORE, 0, 0x1234)
    assert_good(execute(lu, cdb, data, nexus=holder))
    cdb, data = prout(RESERVE, 0x1234, 0, pr_type)
    assert_good(execute(lu, cdb, data, nexus=holder))


def test_exported_constants_are_opcode_c1_and_algorithm_01() -> None:
    assert (HASH_RANGE_OPCODE, ALG_XXH3_128) == (0xC1, 0x01)


def test_digest_equals_xxh3_128_of_the_data_written() -> None:
    lu, _ = make_lu()
    data = bytes(range(256)) * (8 * BS // 256)
    assert_good(execute(lu, write16(100, 8), data))
    result = execute(lu, hash_range(100, 8))
    assert_good(result)
    assert result.data_in == xxhash.xxh3_128(data).digest()


def test_digest_is_sixteen_bytes_big_endian_canonical_form() -> None:
    lu, _ = make_lu()
    assert_good(execute(lu, write16(0, 1), b"x" * BS))
    digest = execute(lu, hash_range(0, 1)).data_in
    assert digest == xxhash.xxh3_128_intdigest(b"x" * BS).to_bytes(16, "big")


def test_the_backend_is_asked_for_the_range_in_bytes_once() -> None:
    lu, backend = make_lu(blocks=6000)
    data = bytes(i * 7 % 251 for i in range(5000 * BS))
    backend.data[: len(data)] = data
    backend.calls.clear()
    result = execute(lu, hash_range(0, 5000))
    assert result.data_in == xxhash.xxh3_128(data).digest()
    assert backend.calls == ["read"]


def test_zero_blocks_is_digest_of_empty_input_without_reading() -> None:
    lu, backend = make_lu()
    result = execute(lu, hash_range(5, 0))
    assert_good(result)
    assert result.data_in == xxhash.xxh3_128(b"").digest()
    assert "read" not in backend.calls


def test_unwritten_range_digest_equals_digest_of_zeros() -> None:
    lu, _ = make_lu()
    assert_good(execute(lu, write16(999, 1), b"w" * BS))
    assert_good(execute(lu, write16(1016, 1), b"w" * BS))
    result = execute(lu, hash_range(1000, 16))
    assert_good(result)
    assert result.data_in == xxhash.xxh3_128(bytes(16 * BS)).digest()


def test_range_beyond_capacity_is_lba_out_of_range() -> None:
    lu, backend = make_lu()
    assert sense_of(execute(lu, hash_range(2047, 2))) == (5, 0x21, 0x00)
    assert "read" not in backend.calls


def test_zero_blocks_past_the_end_is_lba_out_of_range() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, hash_range(2049, 0))) == (5, 0x21, 0x00)


def test_last_possible_lba_is_lba_out_of_range() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, hash_range(2**64 - 1, 1))) == (5, 0x21, 0x00)


def test_unknown_algorithm_is_invalid_field_in_cdb_at_byte_1() -> None:
    lu, _ = make_lu()
    for algorithm in (0x00, 0x04, 0xFF):
        result = execute(lu, hash_range(0, 1, algorithm))
        assert sense_of(result) == (5, 0x24, 0x00)
        assert field_pointer(result.sense) == 1


def test_reserved_byte_set_is_invalid_field_in_cdb_at_byte_14() -> None:
    lu, _ = make_lu()
    result = execute(lu, hash_range(0, 1, reserved=0x01))
    assert sense_of(result) == (5, 0x24, 0x00)
    assert field_pointer(result.sense) == 14


def test_more_than_64_mib_is_invalid_field_in_cdb_at_byte_10() -> None:
    lu, backend = make_lu(blocks=(64 << 20) // 4096 + 1, block_size=4096)
    result = execute(lu, hash_range(0, (64 << 20) // 4096 + 1))
    assert sense_of(result) == (5, 0x24, 0x00)
    assert field_pointer(result.sense) == 10
    assert "read" not in backend.calls


def test_exactly_64_mib_is_hashed() -> None:
    lu, _ = make_lu(blocks=(64 << 20) // 4096, block_size=4096)
    result = execute(lu, hash_range(0, (64 << 20) // 4096))
    assert_good(result)
    assert result.data_in == xxhash.xxh3_128(bytes(64 << 20)).digest()


def test_short_cdb_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, hash_range(0, 1)[:10])) == (5, 0x24, 0x00)


def test_read_error_is_unrecovered_read_error_with_lba() -> None:
    lu, backend = make_lu()
    backend.fail["read"] = OSError(errno.EIO, "bad sector")
    result = execute(lu, hash_range(12, 4))
    assert sense_of(result) == (3, 0x11, 0x00)
    assert sense_information(result.sense) == 12


def test_pending_unit_attention_is_reported_before_hashing() -> None:
    lu, backend = make_lu(ua_on_new_nexus=True)
    assert sense_of(execute(lu, hash_range(0, 1))) == (6, 0x29, 0x00)
    assert "read" not in backend.calls


def test_exclusive_access_reservation_of_another_nexus_is_reservation_conflict() -> None:
    lu, _ = make_lu()
    reserve(lu, NEXUS_A, EXCLUSIVE_ACCESS)
    assert execute(lu, hash_range(0, 1), nexus=NEXUS_B).status == Status.RESERVATION_CONFLICT


def test_write_exclusive_reservation_of_another_nexus_allows_hashing() -> None:
    lu, _ = make_lu()
    reserve(lu, NEXUS_A, WRITE_EXCLUSIVE)
    assert_good(execute(lu, hash_range(0, 1), nexus=NEXUS_B))


def test_spc2_reservation_of_another_nexus_is_reservation_conflict() -> None:
    lu, _ = make_lu()
    assert_good(execute(lu, bytes((0x16, 0, 0, 0, 0, 0))))
    assert execute(lu, hash_range(0, 1), nexus=NEXUS_B).status == Status.RESERVATION_CONFLICT


def test_report_one_command_says_hash_range_is_supported_with_its_usage_mask() -> None:
    lu, _ = make_lu()
    data = execute(lu, rsoc_one(HASH_RANGE_OPCODE)).data_in
    assert data[1] & 0x07 == 0x03
    assert int.from_bytes(data[2:4], "big") == 16
    assert data[4:] == bytes((0xC1, 0xFF, *(0xFF,) * 8, *(0xFF,) * 4, 0x00, 0x00))


def test_report_all_commands_lists_hash_range_without_service_action() -> None:
    lu, _ = make_lu()
    data = execute(lu, rsoc_all()).data_in
    descriptors = {
        data[pos]: struct.unpack_from(">HxBH", data, pos + 2) for pos in range(4, len(data), 8)
    }
    assert descriptors[HASH_RANGE_OPCODE] == (0, 0, 16)
