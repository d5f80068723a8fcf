"""MODE SENSE(6/10) and MODE SELECT(6/10)."""

from __future__ import annotations

import struct

from test_scsi_support import (
    NEXUS_B,
    TEST_UNIT_READY,
    assert_good,
    execute,
    make_lu,
    read10,
    sense_of,
    write10,
)

from reservoir.agent.scsi import LogicalUnit

BS = 512


def sense6(
    page: int = 0x3F, pc: int = 0, dbd: bool = False, alloc: int = 255, sub: int = 0
) -> bytes:
    return bytes((0x1A, 0x08 if dbd else 0, (pc << 6) | page, sub, alloc, 0))


def sense10(page: int = 0x3F, pc: int = 0, *, dbd: bool = False, llbaa: bool = False) -> bytes:
    flags = (0x08 if dbd else 0) | (0x10 if llbaa else 0)
    return struct.pack(">BBBB3xHB", 0x5A, flags, (pc << 6) | page, 0, 1024, 0)


def select6(data: bytes, sp: bool = False) -> bytes:
    return bytes((0x15, 0x10 | (1 if sp else 0), 0, 0, len(data), 0))


def select10(data: bytes) -> bytes:
    return struct.pack(">BB5xHB", 0x55, 0x10, len(data), 0)


def pages_of(data: bytes, header: int) -> dict[int, bytes]:
    found, pos = {}, header
    while pos < len(data):
        found[data[pos] & 0x3F] = data[pos : pos + 2 + data[pos + 1]]
        pos += 2 + data[pos + 1]
    return found


def current_page(lu: LogicalUnit, page: int) -> bytes:
    return execute(lu, sense6(page, dbd=True)).data_in[4:]


def test_mode_sense6_all_pages_has_header_block_descriptor_and_pages() -> None:
    lu, _ = make_lu()
    data = execute(lu, sense6()).data_in
    assert data[0] == len(data) - 1
    assert data[2] == 0x10  # DPOFUA, not write protected
    assert data[3] == 8
    assert struct.unpack(">I", data[4:8])[0] == 2048
    assert int.from_bytes(data[9:12], "big") == BS
    assert set(pages_of(data, 12)) == {0x08, 0x0A, 0x1C}


def test_mode_sense6_with_dbd_omits_block_descriptor() -> None:
    lu, _ = make_lu()
    data = execute(lu, sense6(0x08, dbd=True)).data_in
    assert data[3] == 0
    assert data[4] == 0x08
    assert len(data) == 4 + 20


def test_mode_sense6_allocation_length_truncates_without_error() -> None:
    lu, _ = make_lu()
    result = execute(lu, sense6(alloc=4))
    assert_good(result)
    assert len(result.data_in) == 4


def test_mode_sense10_long_lba_block_descriptor() -> None:
    lu, _ = make_lu()
    data = execute(lu, sense10(0x0A, llbaa=True)).data_in
    assert int.from_bytes(data[:2], "big") == len(data) - 2
    assert data[4] & 0x01
    assert int.from_bytes(data[6:8], "big") == 16
    assert int.from_bytes(data[8:16], "big") == 2048
    assert int.from_bytes(data[20:24], "big") == BS
    assert data[24] == 0x0A


def test_mode_sense_all_subpages_form_is_accepted() -> None:
    lu, _ = make_lu()
    assert execute(lu, sense6(sub=0xFF)).data_in == execute(lu, sense6()).data_in


def test_mode_sense_caching_page_reports_write_cache_enabled() -> None:
    lu, _ = make_lu()
    assert current_page(lu, 0x08)[2] & 0x04
    lu_wt, _ = make_lu(write_cache=False)
    assert not current_page(lu_wt, 0x08)[2] & 0x04


def test_mode_sense_control_page_is_the_same_directly_and_in_all_pages() -> None:
    lu, _ = make_lu()
    direct = current_page(lu, 0x0A)
    assert pages_of(execute(lu, sense6(dbd=True)).data_in, 4)[0x0A] == direct
    assert direct[3] >> 4 == 1  # unrestricted reordering
    assert direct[8:10] == b"\xff\xff"


def test_mode_sense_changeable_values_show_wce_dsense_and_swp() -> None:
    lu, _ = make_lu()
    pages = pages_of(execute(lu, sense6(pc=1, dbd=True)).data_in, 4)
    assert pages[0x08][2] == 0x04
    assert pages[0x0A][2] == 0x04 and pages[0x0A][4] == 0x08
    assert not any(pages[0x1C][2:])


def test_mode_sense_default_values_are_returned() -> None:
    lu, _ = make_lu()
    assert_good(execute(lu, sense6(pc=2)))


def test_mode_sense_saved_values_are_saving_parameters_not_supported() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, sense6(pc=3))) == (5, 0x39, 0x00)


def test_mode_sense_unsupported_page_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, sense6(0x19))) == (5, 0x24, 0x00)
    assert sense_of(execute(lu, sense6(0x08, sub=1))) == (5, 0x24, 0x00)


def test_mode_sense_of_read_only_lu_sets_wp() -> None:
    lu, _ = make_lu(read_only=True)
    assert execute(lu, sense6()).data_in[2] & 0x80


def test_mode_select_clears_wce_and_tells_other_nexuses() -> None:
    lu, backend = make_lu()
    execute(lu, TEST_UNIT_READY, nexus=NEXUS_B)
    page = bytearray(current_page(lu, 0x08))
    page[2] &= ~0x04
    data = bytes(4) + bytes(page)
    assert_good(execute(lu, select6(data), data))
    assert not current_page(lu, 0x08)[2] & 0x04
    assert_good(execute(lu, write10(0, 1), bytes(BS)))
    assert backend.flushes == 1
    assert sense_of(execute(lu, TEST_UNIT_READY, nexus=NEXUS_B)) == (6, 0x2A, 0x01)
    assert_good(execute(lu, TEST_UNIT_READY, nexus=NEXUS_B))


def test_mode_select10_with_block_descriptor_of_the_block_size_is_accepted() -> None:
    lu, _ = make_lu()
    page = current_page(lu, 0x0A)
    data = struct.pack(">HBBBBH", 0, 0, 0, 0, 0, 8) + struct.pack(">IxBH", 0, 0, BS) + page
    assert_good(execute(lu, select10(data), data))


def test_mode_select_block_descriptor_with_other_block_size_is_invalid() -> None:
    lu, _ = make_lu()
    data = bytes((0, 0, 0, 8)) + struct.pack(">IxBH", 0, 0, 4096)
    assert sense_of(execute(lu, select6(data), data)) == (5, 0x26, 0x00)


def test_mode_select_setting_swp_makes_writes_fail_with_write_protected() -> None:
    lu, _ = make_lu()
    page = bytearray(current_page(lu, 0x0A))
    page[4] |= 0x08
    data = bytes(4) + bytes(page)
    assert_good(execute(lu, select6(data), data))
    assert execute(lu, sense6()).data_in[2] & 0x80
    assert_good(execute(lu, read10(0, 1)))
    assert sense_of(execute(lu, write10(0, 1), bytes(BS))) == (7, 0x27, 0x02)
    page[4] &= ~0x08
    data = bytes(4) + bytes(page)
    assert_good(execute(lu, select6(data), data))
    assert_good(execute(lu, write10(0, 1), bytes(BS)))


def test_mode_select_setting_d_sense_switches_to_descriptor_sense() -> None:
    lu, _ = make_lu()
    page = bytearray(current_page(lu, 0x0A))
    page[2] |= 0x04
    data = bytes(4) + bytes(page)
    assert_good(execute(lu, select6(data), data))
    result = execute(lu, read10(4096, 1))
    assert result.sense[0] == 0x72
    assert sense_of(result) == (5, 0x21, 0x00)


def test_mode_select_with_sp_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    data = bytes(4) + current_page(lu, 0x08)
    assert sense_of(execute(lu, select6(data, sp=True), data)) == (5, 0x24, 0x00)


def test_mode_select_of_unsupported_page_is_invalid_field_in_parameter_list() -> None:
    lu, _ = make_lu()
    data = bytes(4) + bytes((0x19, 0x06)) + bytes(6)
    assert sense_of(execute(lu, select6(data), data)) == (5, 0x26, 0x00)


def test_mode_select_with_wrong_page_length_is_invalid_field_in_parameter_list() -> None:
    lu, _ = make_lu()
    data = bytes(4) + bytes((0x08, 0x0A)) + bytes(10)
    assert sense_of(execute(lu, select6(data), data)) == (5, 0x26, 0x00)


def test_mode_select_with_truncated_page_is_parameter_list_length_error() -> None:
    lu, _ = make_lu()
    data = bytes(4) + current_page(lu, 0x08)[:10]
    assert sense_of(execute(lu, select6(data), data)) == (5, 0x1A, 0x00)


def test_mode_select_rejects_the_whole_list_if_one_page_is_bad() -> None:
    lu, _ = make_lu()
    page = bytearray(current_page(lu, 0x08))
    page[2] = 0
    data = bytes(4) + bytes(page) + bytes((0x19, 0x02, 0, 0))
    assert sense_of(execute(lu, select6(data), data)) == (5, 0x26, 0x00)
    assert current_page(lu, 0x08)[2] & 0x04


def test_mode_select_with_zero_length_is_good() -> None:
    lu, _ = make_lu()
    assert_good(execute(lu, select6(b"")))
