"""LUN table routing, unit attentions, REPORT LUNS, REPORT SUPPORTED OPERATION CODES
and the small device commands."""

from __future__ import annotations

import struct

from test_scsi_support import (
    NEXUS_A,
    NEXUS_B,
    TARGET,
    TEST_UNIT_READY,
    MemoryBackend,
    assert_good,
    cdb10,
    cdb16,
    execute,
    inquiry,
    make_lu,
    sense_of,
)

from reservoir.agent.scsi import LogicalUnit, LunTable, Status, decode_sense

REQUEST_SENSE = bytes((0x03, 0, 0, 0, 252, 0))


def report_luns(select: int = 0, alloc: int = 1024) -> bytes:
    return struct.pack(">BxB3xIxx", 0xA0, select, alloc)


def rsoc(options: int = 0, opcode: int = 0, action: int = 0, rctd: bool = False) -> bytes:
    return struct.pack(
        ">BBBBHIxx", 0xA3, 0x0C, options | (0x80 if rctd else 0), opcode, action, 65535
    )


def table(*luns: int, **options: object) -> LunTable:
    units = {
        lun: LogicalUnit(
            MemoryBackend(64),
            lun=lun,
            serial=f"S{lun}",
            target_name=TARGET,
            **options,  # type: ignore[arg-type]
        )
        for lun in luns
    }
    return LunTable(units)


# -- LUN table -------------------------------------------------------------------------


def test_report_luns_lists_every_configured_lun_in_order() -> None:
    data = execute(table(3, 0, 300), report_luns(), lun=3).data_in
    assert int.from_bytes(data[:4], "big") == 24
    assert data[8:] == bytes(8) + b"\x00\x03" + bytes(6) + b"\x41\x2c" + bytes(6)


def test_report_luns_is_answered_for_lun_0_without_a_unit() -> None:
    data = execute(table(5), report_luns(), lun=0).data_in
    assert data[8:10] == b"\x00\x05"


def test_report_luns_of_well_known_luns_is_empty() -> None:
    data = execute(table(0), report_luns(select=1)).data_in
    assert data == bytes(8)


def test_report_luns_with_bad_select_report_is_invalid_field_in_cdb() -> None:
    assert sense_of(execute(table(0), report_luns(select=7))) == (5, 0x24, 0x00)


def test_report_luns_truncates_to_allocation_length() -> None:
    assert len(execute(table(0, 1), report_luns(alloc=12)).data_in) == 12


def test_logical_unit_alone_reports_its_own_lun() -> None:
    lu, _ = make_lu()
    assert execute(lu, report_luns()).data_in[8:10] == b"\x00\x00"


def test_inquiry_to_missing_lun_has_peripheral_qualifier_011b_type_1f() -> None:
    result = execute(table(0), inquiry(), lun=4)
    assert_good(result)
    assert result.data_in[0] == 0x7F


def test_request_sense_to_missing_lun_returns_logical_unit_not_supported() -> None:
    result = execute(table(0), REQUEST_SENSE, lun=4)
    assert_good(result)
    assert decode_sense(result.data_in) == (5, 0x25, 0x00)


def test_other_commands_to_missing_lun_are_logical_unit_not_supported() -> None:
    assert sense_of(execute(table(0), TEST_UNIT_READY, lun=4)) == (5, 0x25, 0x00)


def test_commands_are_routed_to_the_addressed_unit() -> None:
    luns = table(0, 1)
    assert execute(luns, inquiry(1, 0x80), lun=1).data_in[4:] == b"S1"


def test_units_mapping_exposes_the_logical_units() -> None:
    luns = table(0, 2)
    assert sorted(luns.units) == [0, 2]
    assert luns.units[2].lun == 2


# -- unit attentions -------------------------------------------------------------------


def test_first_command_of_a_new_nexus_reports_power_on_reset_once() -> None:
    lu, _ = make_lu(ua_on_new_nexus=True)
    assert sense_of(execute(lu, TEST_UNIT_READY)) == (6, 0x29, 0x00)
    assert_good(execute(lu, TEST_UNIT_READY))


def test_inquiry_and_report_luns_do_not_report_or_clear_unit_attention() -> None:
    lu, _ = make_lu(ua_on_new_nexus=True)
    assert_good(execute(lu, inquiry()))
    assert_good(execute(lu, report_luns()))
    assert sense_of(execute(lu, TEST_UNIT_READY)) == (6, 0x29, 0x00)


def test_request_sense_returns_and_clears_the_unit_attention() -> None:
    lu, _ = make_lu(ua_on_new_nexus=True)
    result = execute(lu, REQUEST_SENSE)
    assert_good(result)
    assert decode_sense(result.data_in) == (6, 0x29, 0x00)
    assert_good(execute(lu, TEST_UNIT_READY))


def test_request_sense_without_condition_is_no_sense_in_requested_format() -> None:
    lu, _ = make_lu()
    fixed = execute(lu, REQUEST_SENSE).data_in
    assert fixed[0] == 0x70 and decode_sense(fixed) == (0, 0, 0)
    descriptor = execute(lu, bytes((0x03, 1, 0, 0, 252, 0))).data_in
    assert descriptor[0] == 0x72


def test_unit_attention_after_reset_is_reported_once_to_every_nexus() -> None:
    lu, _ = make_lu()
    execute(lu, TEST_UNIT_READY)
    execute(lu, TEST_UNIT_READY, nexus=NEXUS_B)
    lu.reset(NEXUS_A)
    for nexus in (NEXUS_A, NEXUS_B):
        assert sense_of(execute(lu, TEST_UNIT_READY, nexus=nexus)) == (6, 0x29, 0x03)
        assert_good(execute(lu, TEST_UNIT_READY, nexus=nexus))


def test_unit_attention_precedes_invalid_operation_code() -> None:
    lu, _ = make_lu(ua_on_new_nexus=True)
    unknown = bytes((0xC5,)) + bytes(9)  # a vendor-specific opcode nobody here implements
    assert sense_of(execute(lu, unknown)) == (6, 0x29, 0x00)
    assert sense_of(execute(lu, unknown)) == (5, 0x20, 0x00)  # INVALID COMMAND OPERATION CODE


def test_target_reset_reports_power_on_reset_on_every_unit() -> None:
    luns = table(0, 1, ua_on_new_nexus=False)
    execute(luns, TEST_UNIT_READY, lun=0, nexus=NEXUS_B)
    execute(luns, TEST_UNIT_READY, lun=1, nexus=NEXUS_B)
    luns.reset_all(None)
    assert sense_of(execute(luns, TEST_UNIT_READY, lun=0, nexus=NEXUS_B)) == (6, 0x29, 0x00)
    assert sense_of(execute(luns, TEST_UNIT_READY, lun=1, nexus=NEXUS_B)) == (6, 0x29, 0x00)


def test_lost_nexus_is_new_again_when_it_returns() -> None:
    lu, _ = make_lu(ua_on_new_nexus=True)
    execute(lu, TEST_UNIT_READY)
    lu.nexus_lost(NEXUS_A)
    assert sense_of(execute(lu, TEST_UNIT_READY)) == (6, 0x29, 0x00)


def test_lun_table_forwards_nexus_loss_to_every_unit() -> None:
    luns = table(0, ua_on_new_nexus=False)
    execute(luns, bytes((0x16, 0, 0, 0, 0, 0)))
    luns.nexus_lost(NEXUS_A)
    assert_good(execute(luns, bytes((0x16, 0, 0, 0, 0, 0)), nexus=NEXUS_B))


def test_capacity_change_is_reported_as_capacity_data_has_changed() -> None:
    lu, backend = make_lu()
    execute(lu, TEST_UNIT_READY)
    backend.size *= 2
    assert lu.capacity_changed()
    assert not lu.capacity_changed()
    assert sense_of(execute(lu, TEST_UNIT_READY)) == (6, 0x2A, 0x09)
    assert lu.num_blocks == 4096


# -- REPORT SUPPORTED OPERATION CODES ----------------------------------------------------


def _descriptors(data: bytes) -> list[tuple[int, int, int, int]]:
    """(opcode, service action, flags, CDB length) of an all-commands report."""
    found, pos = [], 4
    while pos < len(data):
        opcode, action, flags, length = struct.unpack_from(">BxHxBH", data, pos)
        found.append((opcode, action, flags, length))
        pos += 20 if flags & 0x02 else 8
    return found


def test_report_supported_opcodes_lists_the_disk_commands() -> None:
    lu, _ = make_lu()
    data = execute(lu, rsoc()).data_in
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    opcodes = {d[0] for d in _descriptors(data)}
    assert {0x00, 0x12, 0x28, 0x2A, 0x88, 0x8A, 0x89, 0x42, 0x93, 0x5E, 0x5F} <= opcodes


def test_report_supported_opcodes_flags_service_actions() -> None:
    lu, _ = make_lu()
    for opcode, action, flags, _ in _descriptors(execute(lu, rsoc()).data_in):
        if opcode in (0x9E, 0xA3, 0x5E, 0x5F):
            assert flags & 0x01
        else:
            assert not flags & 0x01 and action == 0


def test_report_supported_opcodes_with_rctd_adds_timeout_descriptors() -> None:
    lu, _ = make_lu()
    data = execute(lu, rsoc(rctd=True)).data_in
    for pos in range(4, len(data), 20):
        assert data[pos + 5] & 0x02
        assert data[pos + 8 : pos + 10] == b"\x00\x0a"


def test_report_one_command_returns_cdb_usage_with_dpo_fua() -> None:
    lu, _ = make_lu()
    data = execute(lu, rsoc(1, 0x28)).data_in
    assert data[1] & 0x07 == 0x03
    assert int.from_bytes(data[2:4], "big") == 10
    assert data[4] == 0x28
    assert data[5] & 0x18 == 0x18


def test_report_one_command_of_service_action_opcode_needs_option_2() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, rsoc(1, 0x9E))) == (5, 0x24, 0x00)
    data = execute(lu, rsoc(2, 0x9E, 0x10)).data_in
    assert data[4] == 0x9E and int.from_bytes(data[2:4], "big") == 16


def test_report_one_command_option_2_of_plain_opcode_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    result = execute(lu, rsoc(2, 0x28))
    assert sense_of(result) == (5, 0x24, 0x00)
    assert int.from_bytes(result.sense[16:18], "big") != 1  # not the service action field


def test_report_one_command_of_unsupported_opcode_says_not_supported() -> None:
    lu, _ = make_lu()
    assert execute(lu, rsoc(1, 0xC5)).data_in == b"\x00\x01\x00\x00"


def test_report_supported_opcodes_with_bad_reporting_options_is_invalid() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, rsoc(5))) == (5, 0x24, 0x00)


def test_fully_provisioned_lu_does_not_report_unmap() -> None:
    lu, _ = make_lu(thin=False)
    assert 0x42 not in {d[0] for d in _descriptors(execute(lu, rsoc()).data_in)}


def test_every_reported_command_reports_its_own_usage_data() -> None:
    lu, _ = make_lu()
    for opcode, action, flags, length in _descriptors(execute(lu, rsoc()).data_in):
        data = execute(lu, rsoc(2 if flags & 1 else 1, opcode, action)).data_in
        assert data[4] == opcode
        assert int.from_bytes(data[2:4], "big") == length


def test_unknown_maintenance_in_service_action_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    cdb = struct.pack(">BB4xIxx", 0xA3, 0x05, 64)
    assert sense_of(execute(lu, cdb)) == (5, 0x24, 0x00)


# -- small device commands ------------------------------------------------------------


def test_test_unit_ready_is_good() -> None:
    lu, _ = make_lu()
    assert_good(execute(lu, TEST_UNIT_READY))


def test_start_stop_unit_with_load_eject_is_invalid_field_for_fixed_medium() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, bytes((0x1B, 1, 0, 0, 0x02, 0)))) == (5, 0x24, 0x00)


def test_start_stop_unit_stop_flushes_and_unit_stays_ready() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, bytes((0x1B, 0, 0, 0, 0x00, 0))))
    assert backend.flushes == 1
    assert_good(execute(lu, bytes((0x1B, 0, 0, 0, 0x01, 0))))
    assert_good(execute(lu, TEST_UNIT_READY))


def test_prevent_allow_medium_removal_is_accepted() -> None:
    lu, _ = make_lu()
    assert_good(execute(lu, bytes((0x1E, 0, 0, 0, 1, 0))))
    assert_good(execute(lu, bytes((0x1E, 0, 0, 0, 0, 0))))
    assert sense_of(execute(lu, bytes((0x1E, 0, 0, 0, 2, 0)))) == (5, 0x24, 0x00)


def test_synchronize_cache_flushes_the_backend() -> None:
    lu, backend = make_lu()
    assert_good(execute(lu, cdb10(0x35, 0, 0)))
    assert_good(execute(lu, cdb16(0x91, 10, 5)))
    assert backend.flushes == 2


def test_synchronize_cache_beyond_capacity_is_lba_out_of_range() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, cdb10(0x35, 2048, 1))) == (5, 0x21, 0x00)


def test_flush_failure_is_reported_as_write_error() -> None:
    lu, backend = make_lu()
    backend.fail["flush"] = OSError(5, "io")
    assert sense_of(execute(lu, cdb10(0x35, 0, 0))) == (3, 0x0C, 0x00)


def test_pre_fetch_is_good_not_condition_met() -> None:
    lu, _ = make_lu()
    assert execute(lu, cdb10(0x34, 0, 8)).status == Status.GOOD
    assert execute(lu, cdb16(0x90, 2040, 8)).status == Status.GOOD


def test_pre_fetch_beyond_capacity_is_lba_out_of_range() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, cdb16(0x90, 2047, 2))) == (5, 0x21, 0x00)


# -- Data-Out lengths for write residuals ------------------------------------------------


def test_data_out_length_of_writes_is_blocks_times_block_size() -> None:
    luns = table(0)
    assert luns.data_out_length(0, cdb10(0x2A, 0, 3)) == 3 * 512
    assert luns.data_out_length(0, cdb16(0x8A, 0, 2)) == 2 * 512
    assert luns.data_out_length(0, bytes((0x0A, 0, 0, 0, 0, 0))) == 256 * 512
    assert luns.data_out_length(0, struct.pack(">BBIIBB", 0xAA, 0, 0, 5, 0, 0)) == 5 * 512


def test_data_out_length_of_verify_depends_on_bytchk() -> None:
    luns = table(0)
    assert luns.data_out_length(0, cdb10(0x2F, 0, 4)) == 0
    assert luns.data_out_length(0, cdb10(0x2F, 0, 4, 0x02)) == 4 * 512
    assert luns.data_out_length(0, cdb16(0x8F, 0, 4, 0x06)) == 512


def test_data_out_length_of_parameter_list_commands_and_others() -> None:
    luns = table(0)
    assert luns.data_out_length(0, struct.pack(">BBQ3xBBB", 0x89, 0, 0, 2, 0, 0)) == 2048
    assert luns.data_out_length(0, struct.pack(">BB4xBHB", 0x42, 0, 0, 24, 0)) == 24
    assert luns.data_out_length(0, struct.pack(">BBBxxIB", 0x5F, 0, 0, 24, 0)) == 24
    assert luns.data_out_length(0, bytes((0x15, 0x10, 0, 0, 28, 0))) == 28
    assert luns.data_out_length(0, cdb16(0x93, 0, 9, 0x01)) == 0
    assert luns.data_out_length(0, cdb10(0x41, 0, 9)) == 512
    assert luns.data_out_length(0, cdb10(0x28, 0, 9)) == 0
    assert luns.data_out_length(0, bytes((0x2A, 0))) == 0
    assert luns.data_out_length(7, cdb10(0x2A, 0, 1)) == 0
