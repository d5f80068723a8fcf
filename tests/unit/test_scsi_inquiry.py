"""INQUIRY standard data, VPD pages and REPORT TARGET PORT GROUPS."""

from __future__ import annotations

import struct

from test_scsi_support import (
    NEXUS_B,
    TARGET,
    MemoryBackend,
    assert_good,
    execute,
    inquiry,
    make_lu,
    sense_of,
)

from reservoir.agent.scsi import LogicalUnit, decode_change_mark
from reservoir.agent.storage import ChangeMark


def _designators(page: bytes) -> list[tuple[int, int, bytes]]:
    """(code set byte, type byte, designator) of a Device Identification page."""
    found, pos = [], 4
    while pos < len(page):
        length = page[pos + 3]
        found.append((page[pos], page[pos + 1], page[pos + 4 : pos + 4 + length]))
        pos += 4 + length
    return found


def test_standard_inquiry_reports_direct_access_spc4_hisup_cmdque_tpgs() -> None:
    lu, _ = make_lu()
    data = execute(lu, inquiry()).data_in
    assert data[0] == 0x00
    assert data[2] == 0x06
    assert data[3] == 0x12
    assert data[5] & 0x30 == 0x10
    assert data[7] & 0x02
    assert data[4] == len(data) - 5


def test_standard_inquiry_identification_fields_are_padded_ascii() -> None:
    lu, _ = make_lu(vendor="ACME", product="DISK", revision="7")
    data = execute(lu, inquiry()).data_in
    assert data[8:16] == b"ACME    "
    assert data[16:32] == b"DISK".ljust(16)
    assert data[32:36] == b"7   "


def test_standard_inquiry_claims_spc4_and_sbc3_version_descriptors() -> None:
    lu, _ = make_lu()
    data = execute(lu, inquiry()).data_in
    descriptors = struct.unpack(">8H", data[58:74])
    assert 0x0460 in descriptors
    assert 0x04C0 in descriptors


def test_inquiry_allocation_length_truncates_and_zero_returns_nothing() -> None:
    lu, _ = make_lu()
    assert len(execute(lu, inquiry(alloc=36)).data_in) == 36
    result = execute(lu, inquiry(alloc=0))
    assert_good(result)
    assert result.data_in == b""


def test_inquiry_allocation_length_is_16_bits() -> None:
    lu, _ = make_lu()
    assert execute(lu, inquiry(alloc=256)).data_in == execute(lu, inquiry(alloc=255)).data_in


def test_inquiry_page_code_without_evpd_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, inquiry(0, 1))) == (5, 0x24, 0x00)


def test_inquiry_cmddt_bit_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, inquiry(2, 0))) == (5, 0x24, 0x00)


def test_inquiry_unsupported_vpd_page_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, inquiry(1, 0x89))) == (5, 0x24, 0x00)


def test_supported_vpd_pages_list_is_readable_page_by_page() -> None:
    lu, _ = make_lu()
    page = execute(lu, inquiry(1, 0x00)).data_in
    assert list(page[4:]) == [0x00, 0x80, 0x83, 0xB0, 0xB1, 0xB2]
    for code in page[4:]:
        result = execute(lu, inquiry(1, code))
        assert_good(result)
        assert result.data_in[1] == code
        assert int.from_bytes(result.data_in[2:4], "big") == len(result.data_in) - 4


def test_fully_provisioned_lu_omits_logical_block_provisioning_page() -> None:
    lu, _ = make_lu(thin=False)
    assert 0xB2 not in execute(lu, inquiry(1, 0x00)).data_in[4:]
    assert sense_of(execute(lu, inquiry(1, 0xB2))) == (5, 0x24, 0x00)


def test_unit_serial_number_page_carries_the_serial() -> None:
    lu, _ = make_lu()
    assert execute(lu, inquiry(1, 0x80)).data_in[4:] == b"SN0001"


def test_device_identification_has_naa6_lu_designator() -> None:
    lu, _ = make_lu()
    designators = _designators(execute(lu, inquiry(1, 0x83)).data_in)
    naa = [d for d in designators if d[1] & 0x3F == 0x03]
    assert len(naa) == 1
    assert naa[0][0] == 0x01
    assert len(naa[0][2]) == 16
    assert naa[0][2][0] >> 4 == 6


def test_device_identification_naa_is_stable_and_unique_per_lu() -> None:
    first = execute(make_lu()[0], inquiry(1, 0x83)).data_in
    again = execute(make_lu()[0], inquiry(1, 0x83)).data_in
    assert first == again
    backend = make_lu()[1]
    other = LogicalUnit(backend, lun=1, serial="SN0002", target_name=TARGET)
    assert execute(other, inquiry(1, 0x83)).data_in != first


def test_device_id_given_as_naa6_is_used_verbatim() -> None:
    naa = bytes.fromhex("6001405aabbccddeeff0011223344556")
    lu, _ = make_lu(device_id=naa)
    designators = _designators(execute(lu, inquiry(1, 0x83)).data_in)
    assert (0x01, 0x03, naa) in designators


def test_device_identification_names_target_and_relative_port_of_the_nexus() -> None:
    lu, _ = make_lu()
    designators = _designators(execute(lu, inquiry(1, 0x83), nexus=NEXUS_B).data_in)
    names = {d[2].rstrip(b"\x00") for d in designators if d[1] & 0x0F == 0x08}
    assert TARGET.encode() in names
    assert f"{TARGET},t,0x0002".encode() in names
    ports = [d for d in designators if d[1] & 0x0F == 0x04]
    assert ports[0][2] == b"\x00\x00\x00\x02"
    groups = [d for d in designators if d[1] & 0x0F == 0x05]
    assert groups[0][2] == b"\x00\x00\x00\x01"


def test_scsi_name_strings_are_nul_padded_to_multiples_of_four() -> None:
    lu, _ = make_lu()
    for _, kind, value in _designators(execute(lu, inquiry(1, 0x83)).data_in):
        if kind & 0x0F == 0x08:
            assert len(value) % 4 == 0
            assert value.endswith(b"\x00")


def test_block_limits_page_has_sbc3_length_and_limits() -> None:
    lu, _ = make_lu()
    page = execute(lu, inquiry(1, 0xB0)).data_in
    assert page[3] == 0x3C
    assert page[4] & 0x01  # WSNZ
    assert page[5] == 255  # MAXIMUM COMPARE AND WRITE LENGTH
    assert int.from_bytes(page[6:8], "big") == 8  # 4 KiB granularity
    assert int.from_bytes(page[8:12], "big") == (8 << 20) // 512
    assert int.from_bytes(page[20:24], "big") == 0xFFFFFFFF
    assert 256 <= int.from_bytes(page[24:28], "big") <= 1 << 20
    assert int.from_bytes(page[36:44], "big") == 0xFFFF


def test_block_limits_of_fully_provisioned_lu_reports_no_unmap() -> None:
    lu, _ = make_lu(thin=False)
    page = execute(lu, inquiry(1, 0xB0)).data_in
    assert page[20:28] == bytes(8)


def test_block_device_characteristics_reports_non_rotating_medium() -> None:
    lu, _ = make_lu()
    page = execute(lu, inquiry(1, 0xB1)).data_in
    assert page[3] == 0x3C
    assert page[4:6] == b"\x00\x01"


def test_logical_block_provisioning_page_reports_unmap_write_same_and_thin() -> None:
    lu, _ = make_lu()
    page = execute(lu, inquiry(1, 0xB2)).data_in
    assert page[5] & 0xE0 == 0xE0  # LBPU LBPWS LBPWS10
    assert page[5] & 0x04  # LBPRZ
    assert page[5] & 0x02 == 0  # no ANC_SUP
    assert page[6] & 0x07 == 0x02  # thin provisioned


def test_report_target_port_groups_lists_one_optimized_group_with_the_ports() -> None:
    lu, _ = make_lu()
    execute(lu, inquiry(1, 0x83), nexus=NEXUS_B)
    cdb = struct.pack(">BB4xIBB", 0xA3, 0x0A, 1024, 0, 0)
    data = execute(lu, cdb).data_in
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    assert data[4] & 0x0F == 0  # active/optimized
    assert data[5] & 0x01
    assert data[11] == 2
    assert data[12:20] == b"\x00\x00\x00\x01\x00\x00\x00\x02"


def test_report_target_port_groups_extended_header() -> None:
    lu, _ = make_lu()
    cdb = struct.pack(">BB4xIBB", 0xA3, 0x2A, 1024, 0, 0)
    data = execute(lu, cdb).data_in
    assert data[4] == 0x10
    assert int.from_bytes(data[:4], "big") == len(data) - 4


class MarkedBackend(MemoryBackend):
    """A backend that keeps a change mark, as our storage engine's volumes do."""

    def __init__(self) -> None:
        super().__init__()
        self.mark = ChangeMark("its modification and change times", "2049:7 1048576 1 1")

    def change_mark(self) -> ChangeMark:
        return self.mark


def test_a_backend_with_a_change_mark_offers_it_in_vendor_page_c0() -> None:
    backend = MarkedBackend()
    lu = LogicalUnit(backend, lun=0, serial="SN0001", target_name=TARGET, ua_on_new_nexus=False)
    assert 0xC0 in execute(lu, inquiry(1, 0x00)).data_in[4:]
    page = execute(lu, inquiry(1, 0xC0)).data_in
    assert decode_change_mark(page) == (backend.mark.how, backend.mark.state)
    backend.mark = ChangeMark(backend.mark.how, "2049:7 1048576 2 2")  # written since
    assert decode_change_mark(execute(lu, inquiry(1, 0xC0)).data_in) == (
        backend.mark.how,
        "2049:7 1048576 2 2",
    )


def test_a_backend_without_a_change_mark_refuses_page_c0() -> None:
    lu, _ = make_lu()
    assert 0xC0 not in execute(lu, inquiry(1, 0x00)).data_in[4:]
    assert sense_of(execute(lu, inquiry(1, 0xC0))) == (5, 0x24, 0x00)


def test_another_vendors_page_c0_is_not_taken_for_a_change_mark() -> None:
    foreign = bytes((0, 0xC0, 0, 20)) + b"ACME-PAGE-C0-DATA\nxx"
    assert decode_change_mark(foreign) is None
    assert decode_change_mark(bytes((0, 0x83, 0, 0))) is None  # another page
    ours = bytes((0, 0xC0, 0, 18)) + b"RESERVOIR-CHMARK\n" + b"s"
    assert decode_change_mark(ours) is None  # no way of watching named
