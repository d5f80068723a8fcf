"""READ CAPACITY, UNMAP, WRITE SAME and GET LBA STATUS."""

from __future__ import annotations

import itertools
import struct

from hypothesis import given
from hypothesis import strategies as st
from test_scsi_support import (
    assert_good,
    cdb10,
    execute,
    make_lu,
    read10,
    sense_of,
    service_action_in,
    unmap_cdb,
    unmap_list,
    write10,
)

from reservoir.agent.scsi import LogicalUnit
from reservoir.agent.scsi._provisioning import DEALLOCATED, MAPPED, provisioning_runs

BS = 512


def write_same_10(lba: int, blocks: int, flags: int = 0) -> bytes:
    return cdb10(0x41, lba, blocks, flags)


def write_same_16(lba: int, blocks: int, flags: int = 0) -> bytes:
    return struct.pack(">BBQIBB", 0x93, flags, lba, blocks, 0, 0)


def lba_status(lu: LogicalUnit, lba: int, alloc: int = 1024) -> list[tuple[int, int, int]]:
    data = execute(lu, service_action_in(0x12, lba, alloc)).data_in
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    return [struct.unpack_from(">QIB", data, pos) for pos in range(8, len(data), 16)]


def test_read_capacity_10_reports_last_lba_and_block_length() -> None:
    lu, _ = make_lu()
    data = execute(lu, bytes((0x25,)) + bytes(9)).data_in
    assert struct.unpack(">II", data) == (2047, 512)


def test_read_capacity_10_lba_without_pmi_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, bytes((0x25, 0, 0, 0, 0, 1, 0, 0, 0, 0)))) == (5, 0x24, 0)


def test_read_capacity_10_of_huge_lu_reports_ffffffff() -> None:
    lu, backend = make_lu()
    backend.size = (1 << 33) * 512
    assert lu.capacity_changed()
    data = execute(lu, bytes((0x25,)) + bytes(9)).data_in
    assert data[:4] == b"\xff\xff\xff\xff"


def test_read_capacity_16_reports_lbpme_and_lbprz_when_thin() -> None:
    lu, _ = make_lu()
    data = execute(lu, service_action_in(0x10)).data_in
    assert struct.unpack(">QI", data[:12]) == (2047, 512)
    assert data[12:14] == b"\x00\x00"  # no protection, LBPPBE 0
    assert data[14] & 0xC0 == 0xC0


def test_read_capacity_16_of_fully_provisioned_lu_clears_lbpme() -> None:
    lu, _ = make_lu(thin=False)
    assert execute(lu, service_action_in(0x10)).data_in[14] == 0


def test_read_capacity_16_allocation_length_below_32_truncates() -> None:
    lu, _ = make_lu()
    for alloc in range(16):
        result = execute(lu, service_action_in(0x10, alloc=alloc))
        assert_good(result)
        assert len(result.data_in) == alloc


def test_unknown_service_action_in_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, service_action_in(0x11))) == (5, 0x24, 0x00)


def test_unmap_deallocates_blocks_which_then_read_as_zero() -> None:
    lu, backend = make_lu()
    execute(lu, write10(0, 16), b"a" * 16 * BS)
    payload = unmap_list((4, 8))
    assert_good(execute(lu, unmap_cdb(len(payload)), payload))
    assert execute(lu, read10(4, 8)).data_in == bytes(8 * BS)
    assert backend.mapped[:16] == b"\x01" * 4 + bytes(8) + b"\x01" * 4


def test_unmap_then_get_lba_status_reports_deallocated_range() -> None:
    lu, _ = make_lu()
    execute(lu, write10(0, 32), b"a" * 32 * BS)
    payload = unmap_list((8, 8))
    assert_good(execute(lu, unmap_cdb(len(payload)), payload))
    runs = lba_status(lu, 0)
    assert runs[:3] == [(0, 8, MAPPED), (8, 8, DEALLOCATED), (16, 16, MAPPED)]


def test_unmap_with_zero_parameter_list_length_is_good() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, unmap_cdb(0)))
    assert "discard" not in backend.calls


def test_unmap_of_zero_blocks_at_end_of_lu_is_good() -> None:
    lu, _ = make_lu()
    payload = unmap_list((2048, 0))
    assert_good(execute(lu, unmap_cdb(len(payload)), payload))


def test_unmap_without_descriptors_is_good() -> None:
    lu, _ = make_lu()
    payload = unmap_list()
    assert_good(execute(lu, unmap_cdb(len(payload)), payload))


def test_unmap_beyond_capacity_is_lba_out_of_range_and_unmaps_nothing() -> None:
    lu, backend = make_lu()
    payload = unmap_list((0, 1), (2047, 2))
    assert sense_of(execute(lu, unmap_cdb(len(payload)), payload)) == (5, 0x21, 0x00)
    assert "discard" not in backend.calls


def test_unmap_parameter_list_shorter_than_header_is_parameter_list_length_error() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, unmap_cdb(6), bytes(6))) == (5, 0x1A, 0x00)


def test_unmap_descriptor_length_past_the_data_is_parameter_list_length_error() -> None:
    lu, _ = make_lu()
    payload = struct.pack(">HH4x", 38, 32) + bytes(16)
    assert sense_of(execute(lu, unmap_cdb(len(payload)), payload)) == (5, 0x1A, 0x00)


def test_unmap_with_too_many_descriptors_is_invalid_field_in_parameter_list() -> None:
    lu, _ = make_lu()
    payload = unmap_list(*[(0, 0)] * 2049)
    assert sense_of(execute(lu, unmap_cdb(len(payload)), payload)) == (5, 0x26, 0)


def test_unmap_with_anchor_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    payload = unmap_list((0, 1))
    assert sense_of(execute(lu, unmap_cdb(len(payload), anchor=1), payload)) == (5, 0x24, 0)


def test_unmap_on_read_only_lu_is_write_protected() -> None:
    lu, backend = make_lu(read_only=True)
    payload = unmap_list((0, 1))
    assert sense_of(execute(lu, unmap_cdb(len(payload)), payload)) == (7, 0x27, 0x00)
    assert "discard" not in backend.calls


def test_unmap_on_fully_provisioned_lu_is_invalid_command_operation_code() -> None:
    lu, _ = make_lu(thin=False)
    payload = unmap_list((0, 1))
    assert sense_of(execute(lu, unmap_cdb(len(payload)), payload)) == (5, 0x20, 0x00)


def test_write_same_writes_the_block_to_every_block() -> None:
    lu, backend = make_lu()
    block = bytes(range(256)) * 2
    assert_good(execute(lu, write_same_10(10, 5), block))
    assert backend.data[10 * BS : 15 * BS] == block * 5


def test_write_same_16_larger_than_a_chunk_writes_every_block() -> None:
    lu, backend = make_lu(blocks=8192)
    assert_good(execute(lu, write_same_16(1, 4096), b"\x01" * BS))
    assert backend.data[BS : 4097 * BS] == b"\x01" * (4096 * BS)
    assert backend.data[4097 * BS : 4098 * BS] == bytes(BS)


def test_write_same_of_zeros_without_unmap_uses_write_zeroes() -> None:
    lu, backend = make_lu()
    execute(lu, write10(0, 4), b"x" * 4 * BS)
    assert_good(execute(lu, write_same_10(0, 4), bytes(BS)))
    assert "write_zeroes" in backend.calls
    assert backend.data[: 4 * BS] == bytes(4 * BS)
    assert backend.mapped[:4] == b"\x01" * 4


def test_write_same_unmap_on_thin_lu_deallocates_and_reads_zero() -> None:
    lu, backend = make_lu()
    execute(lu, write10(0, 16), b"x" * 16 * BS)
    assert_good(execute(lu, write_same_16(0, 8, 0x08), bytes(BS)))
    assert backend.mapped[:8] == bytes(8)
    assert execute(lu, read10(0, 8)).data_in == bytes(8 * BS)
    assert lba_status(lu, 0)[:2] == [(0, 8, DEALLOCATED), (8, 8, MAPPED)]


def test_write_same_unmap_with_nonzero_pattern_writes_the_pattern() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, write_same_10(0, 2, 0x08), b"p" * BS))
    assert backend.data[: 2 * BS] == b"p" * 2 * BS


def test_write_same_16_ndob_writes_zeros_without_data_out() -> None:
    lu, backend = make_lu()
    execute(lu, write10(0, 2), b"x" * 2 * BS)
    assert_good(execute(lu, write_same_16(0, 2, 0x01)))
    assert backend.data[: 2 * BS] == bytes(2 * BS)


def test_write_same_unmap_on_fully_provisioned_lu_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu(thin=False)
    assert sense_of(execute(lu, write_same_10(0, 1, 0x08), bytes(BS))) == (5, 0x24, 0x00)


def test_write_same_zero_blocks_is_invalid_field_in_cdb_since_wsnz() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, write_same_10(0, 0), bytes(BS))) == (5, 0x24, 0x00)


def test_write_same_zero_blocks_past_the_end_is_lba_out_of_range() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, write_same_10(2049, 0), bytes(BS))) == (5, 0x21, 0x00)
    assert sense_of(execute(lu, write_same_16(2**64 - 1, 0), bytes(BS))) == (5, 0x21, 0x00)


def test_write_same_beyond_capacity_is_lba_out_of_range() -> None:
    lu, backend = make_lu()
    assert sense_of(execute(lu, write_same_10(2040, 9), bytes(BS))) == (5, 0x21, 0x00)
    assert not {"write", "write_zeroes"} & set(backend.calls)


def test_write_same_longer_than_maximum_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu(blocks=70000)
    assert sense_of(execute(lu, write_same_16(0, 65536), bytes(BS))) == (5, 0x24, 0)


def test_write_same_with_wrprotect_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, write_same_10(0, 1, 0x20), bytes(BS))) == (5, 0x24, 0x00)


def test_write_same_with_anchor_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, write_same_10(0, 1, 0x18), bytes(BS))) == (5, 0x24, 0x00)
    assert sense_of(execute(lu, write_same_10(0, 1, 0x10), bytes(BS))) == (5, 0x24, 0x00)


def test_write_same_with_wrong_data_out_size_is_illegal_request() -> None:
    lu, backend = make_lu()
    assert sense_of(execute(lu, write_same_10(0, 1, 0x08), bytes(BS // 2)))[0] == 5
    assert sense_of(execute(lu, write_same_10(0, 1, 0x08), bytes(2 * BS)))[0] == 5
    assert "discard" not in backend.calls


def test_write_same_on_read_only_lu_is_write_protected_even_without_data() -> None:
    lu, _ = make_lu(read_only=True)
    assert sense_of(execute(lu, write_same_10(0, 1, 0x08))) == (7, 0x27, 0x00)


def test_get_lba_status_beyond_capacity_is_lba_out_of_range() -> None:
    lu, _ = make_lu()
    for lba in (2048, 2049, 2**63, 2**64 - 1):
        assert sense_of(execute(lu, service_action_in(0x12, lba, 24))) == (5, 0x21, 0x00)


def test_get_lba_status_with_24_byte_allocation_returns_one_descriptor() -> None:
    lu, _ = make_lu()
    execute(lu, write10(3, 1), bytes(BS))
    result = execute(lu, service_action_in(0x12, 3, 24))
    assert len(result.data_in) == 24
    assert struct.unpack_from(">QIB", result.data_in, 8) == (3, 1, MAPPED)


def test_get_lba_status_of_fully_provisioned_lu_reports_everything_mapped() -> None:
    lu, _ = make_lu(thin=False)
    assert lba_status(lu, 100) == [(100, 1948, MAPPED)]


def test_get_lba_status_when_extents_fail_reports_mapped_or_unknown() -> None:
    lu, backend = make_lu()
    backend.fail["mapped_extents"] = OSError(95, "not supported")
    assert lba_status(lu, 0) == [(0, 2048, MAPPED)]


def test_provisioning_runs_rounds_partially_mapped_blocks_to_mapped() -> None:
    runs = provisioning_runs([(0, 100, False), (100, 10, True), (110, 2000, False)], 0, 4, 512)
    assert runs == [(0, 1, MAPPED), (1, 3, DEALLOCATED)]


extent_lists = st.lists(
    st.tuples(st.integers(0, 8192), st.integers(0, 4096), st.booleans()), max_size=12
)


@given(extent_lists, st.integers(0, 8), st.integers(1, 16))
def test_provisioning_runs_cover_the_range_exactly_once(
    extents: list[tuple[int, int, bool]], start: int, span: int
) -> None:
    runs = provisioning_runs(extents, start, start + span, 512)
    assert runs[0][0] == start
    assert sum(count for _, count, _ in runs) == span
    for (lba, count, state), (next_lba, _, next_state) in itertools.pairwise(runs):
        assert lba + count == next_lba
        assert state != next_state
