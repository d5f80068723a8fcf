"""READ / WRITE / WRITE AND VERIFY / VERIFY / COMPARE AND WRITE / ORWRITE."""

from __future__ import annotations

import asyncio
import errno
import struct

from test_scsi_support import (
    NEXUS_A,
    MemoryBackend,
    assert_good,
    cdb10,
    cdb16,
    compare_and_write,
    execute,
    make_lu,
    read10,
    read16,
    run,
    rw12,
    sense_of,
    write10,
    write16,
)

from reservoir.agent.scsi import LogicalUnit, ScsiCommand, Status, sense_information

BS = 512


def test_write10_then_read10_returns_the_data() -> None:
    lu, _ = make_lu()
    data = bytes(range(256)) * 4
    assert_good(execute(lu, write10(7, 2), data))
    result = execute(lu, read10(7, 2))
    assert_good(result)
    assert result.data_in == data


def test_write16_then_read16_returns_the_data() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, write16(2047, 1), b"z" * BS))
    assert execute(lu, read16(2047, 1)).data_in == b"z" * BS
    assert backend.data[-BS:] == b"z" * BS


def test_write12_then_read12_returns_the_data() -> None:
    lu, _ = make_lu()
    assert_good(execute(lu, rw12(0xAA, 3, 1), b"q" * BS))
    assert execute(lu, rw12(0xA8, 3, 1)).data_in == b"q" * BS


def test_write6_then_read6_returns_the_data() -> None:
    lu, _ = make_lu()
    assert_good(execute(lu, bytes((0x0A, 0, 0, 9, 1, 0)), b"6" * BS))
    assert execute(lu, bytes((0x08, 0, 0, 9, 1, 0))).data_in == b"6" * BS


def test_read6_transfer_length_zero_reads_256_blocks() -> None:
    lu, _ = make_lu()
    result = execute(lu, bytes((0x08, 0, 0, 0, 0, 0)))
    assert_good(result)
    assert len(result.data_in) == 256 * BS


def test_read10_zero_blocks_is_good_without_data() -> None:
    lu, backend = make_lu()
    result = execute(lu, read10(0, 0))
    assert_good(result)
    assert result.data_in == b""
    assert "read" not in backend.calls


def test_read10_beyond_capacity_is_lba_out_of_range() -> None:
    lu, backend = make_lu()
    assert sense_of(execute(lu, read10(2047, 2))) == (5, 0x21, 0x00)
    assert "read" not in backend.calls


def test_read10_zero_blocks_past_the_end_is_lba_out_of_range() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, read10(2049, 0))) == (5, 0x21, 0x00)


def test_read16_at_last_possible_lba_is_lba_out_of_range() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, read16(2**64 - 1, 1))) == (5, 0x21, 0x00)


def test_read10_with_rdprotect_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    for rdprotect in range(1, 8):
        assert sense_of(execute(lu, read10(0, 1, rdprotect << 5))) == (5, 0x24, 0x00)


def test_read10_dpo_fua_and_group_number_are_accepted() -> None:
    lu, _ = make_lu()
    cdb = bytearray(read10(0, 1, 0x18))
    cdb[6] = 0x03
    assert_good(execute(lu, bytes(cdb)))


def test_read_longer_than_maximum_transfer_length_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu(blocks=40000)
    assert sense_of(execute(lu, read16(0, (8 << 20) // BS + 1))) == (5, 0x24, 0x00)


def test_read_medium_error_is_unrecovered_read_error_with_lba() -> None:
    lu, backend = make_lu()
    backend.fail["read"] = OSError(errno.EIO, "bad sector")
    result = execute(lu, read10(12, 1))
    assert sense_of(result) == (3, 0x11, 0x00)
    assert sense_information(result.sense) == 12


def test_write10_beyond_capacity_is_lba_out_of_range_and_writes_nothing() -> None:
    lu, backend = make_lu()
    assert sense_of(execute(lu, write10(2047, 2), bytes(2 * BS))) == (5, 0x21, 0x00)
    assert "write" not in backend.calls


def test_write10_with_wrprotect_is_invalid_field_in_cdb() -> None:
    lu, backend = make_lu()
    assert sense_of(execute(lu, write10(0, 1, 0x20), bytes(BS))) == (5, 0x24, 0x00)
    assert "write" not in backend.calls


def test_write_to_read_only_lu_is_data_protect_write_protected() -> None:
    lu, backend = make_lu(read_only=True)
    assert sense_of(execute(lu, write10(0, 1), bytes(BS))) == (7, 0x27, 0x00)
    assert "write" not in backend.calls


def test_write_to_read_only_backend_is_data_protect_write_protected() -> None:
    lu, _ = make_lu(backend_read_only=True)
    assert sense_of(execute(lu, write16(0, 1), bytes(BS))) == (7, 0x27, 0x00)


def test_write_medium_error_is_write_error() -> None:
    lu, backend = make_lu()
    backend.fail["write"] = OSError(errno.EIO, "io")
    assert sense_of(execute(lu, write10(3, 1), bytes(BS))) == (3, 0x0C, 0x00)


def test_write_without_space_is_space_allocation_failed_write_protect() -> None:
    lu, backend = make_lu()
    backend.fail["write"] = OSError(errno.ENOSPC, "full")
    assert sense_of(execute(lu, write10(3, 1), bytes(BS))) == (7, 0x27, 0x07)


def test_write_zero_blocks_is_good_and_writes_nothing() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, write10(0, 0)))
    assert "write" not in backend.calls


def test_write_with_fua_flushes_the_backend() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, write10(0, 1, 0x08), bytes(BS)))
    assert backend.flushes == 1


def test_write_with_write_cache_enabled_does_not_flush() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, write10(0, 1), bytes(BS)))
    assert backend.flushes == 0


def test_write_with_write_cache_disabled_flushes_every_write() -> None:
    lu, backend = make_lu(write_cache=False)
    assert_good(execute(lu, write10(0, 1), bytes(BS)))
    assert backend.flushes == 1


def test_data_out_longer_than_transfer_length_writes_only_transfer_length() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, write10(0, 1), b"b" * (2 * BS)))
    assert backend.data[:BS] == b"b" * BS
    assert backend.data[BS : 2 * BS] == bytes(BS)


def test_data_out_shorter_by_whole_blocks_writes_what_was_sent() -> None:
    lu, backend = make_lu()
    backend.data[: 2 * BS] = b"a" * (2 * BS)
    assert_good(execute(lu, write10(0, 2), b"b" * BS))
    assert backend.data[: 2 * BS] == b"b" * BS + b"a" * BS


def test_data_out_with_partial_block_is_rejected_without_writing() -> None:
    lu, backend = make_lu()
    assert sense_of(execute(lu, write10(0, 1), b"x" * 200)) == (5, 0x0E, 0x03)
    assert "write" not in backend.calls


def test_empty_data_out_for_a_write_is_good_and_writes_nothing() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, write10(0, 1)))
    assert "write" not in backend.calls


def test_write_and_verify_10_writes_the_data() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, cdb10(0x2E, 5, 1, 0x02), b"v" * BS))
    assert backend.data[5 * BS : 6 * BS] == b"v" * BS
    assert backend.flushes == 1


def test_write_and_verify_12_and_16_write_the_data() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, rw12(0xAE, 1, 1, 0x10), b"1" * BS))
    assert_good(execute(lu, cdb16(0x8E, 2, 1), b"2" * BS))
    assert backend.data[BS : 3 * BS] == b"1" * BS + b"2" * BS


def test_write_and_verify_with_reserved_bytchk_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, cdb10(0x2E, 0, 1, 0x04), bytes(BS))) == (5, 0x24, 0x00)


def test_write_and_verify_beyond_capacity_is_lba_out_of_range() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, cdb16(0x8E, 2048, 1), bytes(BS))) == (5, 0x21, 0x00)


def test_verify_without_bytchk_reads_the_medium() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, cdb10(0x2F, 0, 4), b"ignored"))
    assert "read" in backend.calls


def test_verify_with_bytchk_and_equal_data_is_good() -> None:
    lu, backend = make_lu()
    backend.data[:BS] = b"m" * BS
    assert_good(execute(lu, cdb10(0x2F, 0, 1, 0x02), b"m" * BS))


def test_verify_mismatch_is_miscompare_with_offset_of_first_differing_byte() -> None:
    lu, _ = make_lu()
    data = bytearray(3 * BS)
    data[BS + 17] = 0x58
    result = execute(lu, rw12(0xAF, 0, 3, 0x02), bytes(data))
    assert sense_of(result) == (0x0E, 0x1D, 0x00)
    assert sense_information(result.sense) == BS + 17


def test_verify16_bytchk_3_compares_one_block_with_every_block() -> None:
    lu, backend = make_lu()
    backend.data[: 3 * BS] = b"r" * (3 * BS)
    assert_good(execute(lu, cdb16(0x8F, 0, 3, 0x06), b"r" * BS))
    backend.data[2 * BS] = 0
    result = execute(lu, cdb16(0x8F, 0, 3, 0x06), b"r" * BS)
    assert sense_of(result) == (0x0E, 0x1D, 0x00)
    assert sense_information(result.sense) == 2 * BS


def test_verify_with_reserved_bytchk_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, cdb10(0x2F, 0, 1, 0x04), bytes(BS))) == (5, 0x24, 0x00)


def test_verify_with_vrprotect_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, cdb10(0x2F, 0, 1, 0x22), bytes(BS))) == (5, 0x24, 0x00)


def test_verify_beyond_capacity_is_lba_out_of_range() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, cdb16(0x8F, 2040, 9))) == (5, 0x21, 0x00)


def test_verify_with_short_data_out_is_rejected() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, cdb10(0x2F, 0, 2, 0x02), bytes(BS))) == (5, 0x0E, 0x03)


def test_compare_and_write_with_matching_data_writes_the_second_half() -> None:
    lu, backend = make_lu()
    backend.data[: 2 * BS] = b"A" * (2 * BS)
    assert_good(execute(lu, compare_and_write(0, 2), b"A" * (2 * BS) + b"B" * (2 * BS)))
    assert backend.data[: 2 * BS] == b"B" * (2 * BS)


def test_compare_and_write_miscompare_reports_offset_and_leaves_data() -> None:
    lu, backend = make_lu()
    backend.data[: 3 * BS] = b"A" * (3 * BS)
    compare = bytearray(b"A" * (3 * BS))
    compare[3 * BS - 27] = ord("C")
    result = execute(lu, compare_and_write(0, 3), bytes(compare) + b"B" * (3 * BS))
    assert sense_of(result) == (0x0E, 0x1D, 0x00)
    assert result.sense[0] & 0x80
    assert sense_information(result.sense) == 3 * BS - 27
    assert backend.data[: 3 * BS] == b"A" * (3 * BS)


def test_compare_and_write_of_zero_blocks_is_good() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, compare_and_write(0, 0), bytes(BS)))
    assert "write" not in backend.calls


def test_compare_and_write_zero_blocks_with_a_full_pair_of_data_is_invalid() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, compare_and_write(0, 0), bytes(512 * BS))) == (5, 0x24, 0x00)


def test_compare_and_write_with_wrong_data_out_size_is_illegal_request() -> None:
    lu, backend = make_lu()
    assert sense_of(execute(lu, compare_and_write(0, 1), bytes(4 * BS)))[0] == 5
    assert sense_of(execute(lu, compare_and_write(0, 3), bytes(4 * BS)))[0] == 5
    assert "write" not in backend.calls


def test_compare_and_write_beyond_capacity_is_lba_out_of_range() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, compare_and_write(2047, 2), bytes(4 * BS))) == (5, 0x21, 0x00)


def test_compare_and_write_on_read_only_lu_is_write_protected() -> None:
    lu, _ = make_lu(read_only=True)
    assert sense_of(execute(lu, compare_and_write(0, 1), bytes(2 * BS))) == (7, 0x27, 0x00)


def test_compare_and_write_with_wrprotect_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, compare_and_write(0, 1, 0x40), bytes(2 * BS))) == (5, 0x24, 0)


def test_compare_and_write_with_fua_flushes() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, compare_and_write(0, 1, 0x08), bytes(2 * BS)))
    assert backend.flushes == 1


class SlowReadBackend(MemoryBackend):
    """Reads take a while, so a write can arrive during a COMPARE AND WRITE."""

    async def read(self, offset: int, length: int) -> bytes:
        await asyncio.sleep(0.01)
        return await super().read(offset, length)


def test_compare_and_write_is_atomic_with_respect_to_a_concurrent_write() -> None:
    backend = SlowReadBackend(64)
    lu = LogicalUnit(backend, lun=0, serial="S", target_name="t", ua_on_new_nexus=False)

    async def scenario() -> tuple[int, int]:
        caw = ScsiCommand(compare_and_write(0, 1), NEXUS_A, bytes(BS) + b"C" * BS)
        write = ScsiCommand(write10(0, 1), NEXUS_A, b"W" * BS)
        caw_task = asyncio.create_task(lu.execute(caw))
        await asyncio.sleep(0.001)
        write_result = await lu.execute(write)
        return (await caw_task).status, write_result.status

    assert run(scenario()) == (Status.GOOD, Status.GOOD)
    assert backend.data[:BS] == b"W" * BS


def test_orwrite_ors_the_data_into_the_medium() -> None:
    lu, backend = make_lu()
    backend.data[:BS] = b"\x0f" * BS
    cdb = struct.pack(">BBQIBB", 0x8B, 0, 0, 1, 0, 0)
    assert_good(execute(lu, cdb, b"\xa0" * BS))
    assert backend.data[:BS] == b"\xaf" * BS


def test_orwrite_beyond_capacity_is_lba_out_of_range() -> None:
    lu, _ = make_lu()
    cdb = struct.pack(">BBQIBB", 0x8B, 0, 2048, 1, 0, 0)
    assert sense_of(execute(lu, cdb, bytes(BS))) == (5, 0x21, 0x00)


def test_orwrite_with_orprotect_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    cdb = struct.pack(">BBQIBB", 0x8B, 0x20, 0, 1, 0, 0)
    assert sense_of(execute(lu, cdb, bytes(BS))) == (5, 0x24, 0x00)


def test_unknown_operation_code_is_invalid_command_operation_code() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, bytes((0xC0,)) + bytes(15))) == (5, 0x20, 0x00)


def test_empty_cdb_is_invalid_command_operation_code() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, b"")) == (5, 0x20, 0x00)


def test_truncated_cdb_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, bytes((0x88, 0, 0)))) == (5, 0x24, 0x00)


def test_unexpected_backend_exception_is_hardware_error_internal_target_failure() -> None:
    lu, backend = make_lu()
    backend.fail["read"] = RuntimeError("bug")
    assert sense_of(execute(lu, read10(0, 1))) == (4, 0x44, 0x00)
