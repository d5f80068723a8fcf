"""RESERVE/RELEASE (SPC-2) and persistent reservations (SPC-4 5.12)."""

from __future__ import annotations

import struct

from test_scsi_support import (
    NEXUS_A,
    NEXUS_B,
    TEST_UNIT_READY,
    assert_good,
    execute,
    inquiry,
    make_lu,
    prin,
    prout,
    read10,
    sense_of,
    write10,
)

from reservoir.agent.scsi import LogicalUnit, Nexus, Status

BS = 512
NEXUS_C = Nexus("iqn.c,i,0x000000000003", NEXUS_A.target_port, "iqn.c")
RESERVE6 = bytes((0x16, 0, 0, 0, 0, 0))
RELEASE6 = bytes((0x17, 0, 0, 0, 0, 0))
REGISTER, RESERVE, RELEASE, CLEAR, PREEMPT, _, REGISTER_AND_IGNORE = range(7)
WE, EA, WE_RO, EA_RO, WE_AR, EA_AR = 1, 3, 5, 6, 7, 8
MODE_SENSE6 = bytes((0x1A, 0, 0x3F, 0, 255, 0))


def pr_out(
    lu: LogicalUnit, nexus: Nexus, action: int, key: int, sa_key: int = 0, *, pr_type: int = 0
) -> int:
    cdb, data = prout(action, key, sa_key, pr_type)
    return execute(lu, cdb, data, nexus=nexus).status


def register(lu: LogicalUnit, nexus: Nexus, key: int) -> None:
    assert pr_out(lu, nexus, REGISTER_AND_IGNORE, 0, key) == Status.GOOD


def read_keys(lu: LogicalUnit, nexus: Nexus = NEXUS_A) -> tuple[int, list[int]]:
    data = execute(lu, prin(0), nexus=nexus).data_in
    generation, length = struct.unpack_from(">II", data)
    return generation, [int.from_bytes(data[p : p + 8], "big") for p in range(8, 8 + length, 8)]


def read_reservation(lu: LogicalUnit, nexus: Nexus = NEXUS_A) -> tuple[int, int] | None:
    data = execute(lu, prin(1), nexus=nexus).data_in
    if not int.from_bytes(data[4:8], "big"):
        return None
    return int.from_bytes(data[8:16], "big"), data[21] & 0x0F


def can_read(lu: LogicalUnit, nexus: Nexus) -> bool:
    return execute(lu, read10(1, 1), nexus=nexus).status == Status.GOOD


def can_write(lu: LogicalUnit, nexus: Nexus) -> bool:
    return execute(lu, write10(1, 1), bytes(BS), nexus=nexus).status == Status.GOOD


# -- SPC-2 RESERVE / RELEASE -------------------------------------------------------------


def test_reserve6_from_another_nexus_is_reservation_conflict() -> None:
    lu, _ = make_lu()
    assert_good(execute(lu, RESERVE6))
    assert_good(execute(lu, RESERVE6))
    assert execute(lu, RESERVE6, nexus=NEXUS_B).status == Status.RESERVATION_CONFLICT


def test_reserve6_blocks_other_nexus_media_access_and_mode_sense() -> None:
    lu, _ = make_lu()
    execute(lu, RESERVE6)
    assert not can_read(lu, NEXUS_B)
    assert not can_write(lu, NEXUS_B)
    assert execute(lu, MODE_SENSE6, nexus=NEXUS_B).status == Status.RESERVATION_CONFLICT
    assert can_read(lu, NEXUS_A)
    assert_good(execute(lu, MODE_SENSE6))


def test_reserve6_still_allows_inquiry_from_other_nexus() -> None:
    lu, _ = make_lu()
    execute(lu, RESERVE6)
    assert_good(execute(lu, inquiry(), nexus=NEXUS_B))


def test_release6_from_non_holder_is_good_and_keeps_the_reservation() -> None:
    lu, _ = make_lu()
    execute(lu, RESERVE6)
    assert_good(execute(lu, RELEASE6, nexus=NEXUS_B))
    assert execute(lu, RESERVE6, nexus=NEXUS_B).status == Status.RESERVATION_CONFLICT
    assert_good(execute(lu, RELEASE6))
    assert_good(execute(lu, RESERVE6, nexus=NEXUS_B))


def test_reserve10_third_party_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    assert sense_of(execute(lu, bytes((0x56, 0x10)) + bytes(8))) == (5, 0x24, 0x00)


def test_reserve6_is_released_by_logical_unit_reset() -> None:
    lu, _ = make_lu()
    execute(lu, RESERVE6)
    lu.reset(NEXUS_A)
    assert_good(execute(lu, RESERVE6, nexus=NEXUS_B))


def test_reserve6_is_released_when_its_nexus_is_lost() -> None:
    lu, _ = make_lu()
    execute(lu, RESERVE6)
    lu.nexus_lost(NEXUS_A)
    assert_good(execute(lu, RESERVE6, nexus=NEXUS_B))


def test_reserve6_with_persistent_registrations_is_reservation_conflict() -> None:
    lu, _ = make_lu()
    register(lu, NEXUS_B, 7)
    assert execute(lu, RESERVE6).status == Status.RESERVATION_CONFLICT


def test_persistent_reserve_out_under_spc2_reservation_of_other_is_conflict() -> None:
    lu, _ = make_lu()
    execute(lu, RESERVE6)
    cdb, data = prout(REGISTER, 0, 5)
    assert execute(lu, cdb, data, nexus=NEXUS_B).status == Status.RESERVATION_CONFLICT


# -- registrations -----------------------------------------------------------------------


def test_register_adds_the_key_and_bumps_the_generation() -> None:
    lu, _ = make_lu()
    generation, keys = read_keys(lu)
    assert keys == []
    register(lu, NEXUS_A, 0xABCDEF)
    assert read_keys(lu) == (generation + 1, [0xABCDEF])


def test_register_when_registered_with_zero_key_is_reservation_conflict() -> None:
    lu, _ = make_lu()
    register(lu, NEXUS_A, 5)
    assert pr_out(lu, NEXUS_A, REGISTER, 0, 6) == Status.RESERVATION_CONFLICT


def test_register_from_unregistered_nexus_with_a_key_is_reservation_conflict() -> None:
    lu, _ = make_lu()
    assert pr_out(lu, NEXUS_A, REGISTER, 5, 6) == Status.RESERVATION_CONFLICT


def test_register_with_matching_key_changes_it_and_zero_unregisters() -> None:
    lu, _ = make_lu()
    register(lu, NEXUS_A, 5)
    assert pr_out(lu, NEXUS_A, REGISTER, 5, 9) == Status.GOOD
    assert read_keys(lu)[1] == [9]
    assert pr_out(lu, NEXUS_A, REGISTER, 9, 0) == Status.GOOD
    assert read_keys(lu)[1] == []


def test_unregistered_register_of_zero_key_is_good_without_generation_change() -> None:
    lu, _ = make_lu()
    generation = read_keys(lu)[0]
    assert pr_out(lu, NEXUS_A, REGISTER, 0, 0) == Status.GOOD
    assert read_keys(lu)[0] == generation


def test_read_keys_additional_length_is_not_cut_by_allocation_length() -> None:
    lu, _ = make_lu()
    register(lu, NEXUS_A, 5)
    data = execute(lu, prin(0, alloc=8)).data_in
    assert len(data) == 8
    assert int.from_bytes(data[4:8], "big") == 8


def test_registrations_survive_nexus_loss_and_reset() -> None:
    lu, _ = make_lu()
    register(lu, NEXUS_A, 5)
    lu.nexus_lost(NEXUS_A)
    lu.reset(None)
    assert read_keys(lu)[1] == [5]


# -- reservations ------------------------------------------------------------------------


def test_reserve_by_unregistered_nexus_is_reservation_conflict() -> None:
    lu, _ = make_lu()
    assert pr_out(lu, NEXUS_A, RESERVE, 5, pr_type=WE) == Status.RESERVATION_CONFLICT


def test_reserve_with_wrong_key_is_reservation_conflict() -> None:
    lu, _ = make_lu()
    register(lu, NEXUS_A, 5)
    assert pr_out(lu, NEXUS_A, RESERVE, 6, pr_type=WE) == Status.RESERVATION_CONFLICT


def test_reserve_is_reported_by_read_reservation_without_generation_change() -> None:
    lu, _ = make_lu()
    register(lu, NEXUS_A, 5)
    generation = read_keys(lu)[0]
    assert pr_out(lu, NEXUS_A, RESERVE, 5, pr_type=EA) == Status.GOOD
    assert read_reservation(lu) == (5, EA)
    assert read_keys(lu)[0] == generation


def test_reserve_again_with_same_type_is_good_and_other_type_conflicts() -> None:
    lu, _ = make_lu()
    register(lu, NEXUS_A, 5)
    pr_out(lu, NEXUS_A, RESERVE, 5, pr_type=WE)
    assert pr_out(lu, NEXUS_A, RESERVE, 5, pr_type=WE) == Status.GOOD
    assert pr_out(lu, NEXUS_A, RESERVE, 5, pr_type=EA) == Status.RESERVATION_CONFLICT


def test_reserve_by_other_registrant_is_reservation_conflict() -> None:
    lu, _ = make_lu()
    register(lu, NEXUS_A, 5)
    register(lu, NEXUS_B, 6)
    pr_out(lu, NEXUS_A, RESERVE, 5, pr_type=WE)
    assert pr_out(lu, NEXUS_B, RESERVE, 6, pr_type=WE) == Status.RESERVATION_CONFLICT


def _reserved(pr_type: int) -> LogicalUnit:
    """A holds ``pr_type`` with key 5; B is registered with key 6; C is not registered."""
    lu, _ = make_lu()
    register(lu, NEXUS_A, 5)
    register(lu, NEXUS_B, 6)
    assert pr_out(lu, NEXUS_A, RESERVE, 5, pr_type=pr_type) == Status.GOOD
    return lu


def _access(lu: LogicalUnit) -> tuple[bool, bool, bool, bool]:
    return (
        can_read(lu, NEXUS_B),
        can_write(lu, NEXUS_B),
        can_read(lu, NEXUS_C),
        can_write(lu, NEXUS_C),
    )


def test_write_exclusive_lets_everybody_read_and_only_the_holder_write() -> None:
    lu = _reserved(WE)
    assert can_write(lu, NEXUS_A)
    assert _access(lu) == (True, False, True, False)


def test_exclusive_access_denies_non_holders_reads_and_writes() -> None:
    lu = _reserved(EA)
    assert can_read(lu, NEXUS_A) and can_write(lu, NEXUS_A)
    assert _access(lu) == (False, False, False, False)


def test_write_exclusive_registrants_only_lets_registrants_write() -> None:
    assert _access(_reserved(WE_RO)) == (True, True, True, False)


def test_exclusive_access_registrants_only_denies_unregistered_nexus() -> None:
    assert _access(_reserved(EA_RO)) == (True, True, False, False)


def test_write_exclusive_all_registrants_lets_registrants_write() -> None:
    assert _access(_reserved(WE_AR)) == (True, True, True, False)


def test_exclusive_access_all_registrants_denies_unregistered_nexus() -> None:
    assert _access(_reserved(EA_AR)) == (True, True, False, False)


def test_exclusive_access_still_allows_inquiry_tur_and_read_capacity() -> None:
    lu = _reserved(EA)
    assert_good(execute(lu, inquiry(), nexus=NEXUS_C))
    assert_good(execute(lu, TEST_UNIT_READY, nexus=NEXUS_C))
    assert_good(execute(lu, bytes((0x25,)) + bytes(9), nexus=NEXUS_C))


def test_all_registrants_reservation_reports_key_zero() -> None:
    lu = _reserved(EA_AR)
    assert read_reservation(lu) == (0, EA_AR)


def test_all_registrants_reservation_survives_the_reserving_nexus_leaving() -> None:
    lu = _reserved(WE_AR)
    assert pr_out(lu, NEXUS_A, REGISTER, 5, 0) == Status.GOOD
    assert read_reservation(lu) == (0, WE_AR)
    assert pr_out(lu, NEXUS_B, RELEASE, 6, pr_type=WE_AR) == Status.GOOD
    assert read_reservation(lu) is None


def test_unregistering_the_holder_releases_the_reservation() -> None:
    lu = _reserved(EA)
    assert pr_out(lu, NEXUS_A, REGISTER, 5, 0) == Status.GOOD
    assert read_reservation(lu) is None
    assert can_write(lu, NEXUS_C)


def test_release_with_other_type_is_invalid_release_of_persistent_reservation() -> None:
    lu = _reserved(WE)
    cdb, data = prout(RELEASE, 5, 0, EA)
    assert sense_of(execute(lu, cdb, data)) == (5, 0x26, 0x04)


def test_release_by_non_holder_is_good_and_keeps_the_reservation() -> None:
    lu = _reserved(WE)
    assert pr_out(lu, NEXUS_B, RELEASE, 6, pr_type=WE) == Status.GOOD
    assert read_reservation(lu) == (5, WE)


def test_release_of_registrants_only_reservation_tells_other_registrants() -> None:
    lu = _reserved(WE_RO)
    assert pr_out(lu, NEXUS_A, RELEASE, 5, pr_type=WE_RO) == Status.GOOD
    assert read_reservation(lu) is None
    assert sense_of(execute(lu, TEST_UNIT_READY, nexus=NEXUS_B)) == (6, 0x2A, 0x04)


def test_clear_removes_everything_and_preempts_other_registrants() -> None:
    lu = _reserved(EA)
    generation = read_keys(lu)[0]
    assert pr_out(lu, NEXUS_A, CLEAR, 5) == Status.GOOD
    assert read_keys(lu) == (generation + 1, [])
    assert read_reservation(lu) is None
    assert sense_of(execute(lu, TEST_UNIT_READY, nexus=NEXUS_B)) == (6, 0x2A, 0x03)


def test_clear_by_unregistered_nexus_is_reservation_conflict() -> None:
    lu = _reserved(WE)
    assert pr_out(lu, NEXUS_C, CLEAR, 0) == Status.RESERVATION_CONFLICT


def test_preempt_takes_the_reservation_and_removes_the_holder_registration() -> None:
    lu = _reserved(EA)
    generation = read_keys(lu)[0]
    assert pr_out(lu, NEXUS_B, PREEMPT, 6, 5, pr_type=EA) == Status.GOOD
    assert read_reservation(lu, NEXUS_B) == (6, EA)
    assert read_keys(lu, NEXUS_B) == (generation + 1, [6])
    assert sense_of(execute(lu, TEST_UNIT_READY)) == (6, 0x2A, 0x05)
    assert not can_read(lu, NEXUS_A)


def test_preempt_without_reservation_removes_registrations_with_that_key() -> None:
    lu, _ = make_lu()
    register(lu, NEXUS_A, 5)
    register(lu, NEXUS_B, 5)
    assert pr_out(lu, NEXUS_B, PREEMPT, 5, 5, pr_type=EA) == Status.GOOD
    assert read_keys(lu, NEXUS_B)[1] == [5]
    assert read_reservation(lu, NEXUS_B) is None
    assert sense_of(execute(lu, TEST_UNIT_READY)) == (6, 0x2A, 0x05)


def test_preempt_of_unknown_key_is_reservation_conflict() -> None:
    lu = _reserved(WE)
    assert pr_out(lu, NEXUS_B, PREEMPT, 6, 99, pr_type=WE) == Status.RESERVATION_CONFLICT


def test_preempt_with_zero_key_of_ordinary_reservation_is_invalid_parameter() -> None:
    lu = _reserved(WE)
    cdb, data = prout(PREEMPT, 6, 0, WE)
    assert sense_of(execute(lu, cdb, data, nexus=NEXUS_B)) == (5, 0x26, 0x00)


def test_preempt_with_zero_key_of_all_registrants_reservation_takes_it() -> None:
    lu = _reserved(WE_AR)
    register(lu, NEXUS_C, 7)
    assert pr_out(lu, NEXUS_B, PREEMPT, 6, 0, pr_type=WE) == Status.GOOD
    assert read_keys(lu, NEXUS_B)[1] == [6]
    assert read_reservation(lu, NEXUS_B) == (6, WE)


# -- PERSISTENT RESERVE IN / OUT fields ---------------------------------------------------


def test_report_capabilities_lists_all_six_types_and_crh() -> None:
    lu, _ = make_lu()
    data = execute(lu, prin(2)).data_in
    assert data[:2] == b"\x00\x08"
    assert data[2] & 0x10
    assert data[2] & 0x0D == 0  # no SIP_C, ATP_C, PTPL_C
    assert data[3] & 0x80
    assert data[4:6] == b"\xea\x01"


def test_read_full_status_describes_each_registration_with_transport_id() -> None:
    lu = _reserved(EA)
    data = execute(lu, prin(3)).data_in
    assert int.from_bytes(data[4:8], "big") == len(data) - 8
    assert int.from_bytes(data[8:16], "big") == 5
    assert data[20] & 0x01 and data[21] == EA
    assert data[26:28] == b"\x00\x01"
    tid_length = int.from_bytes(data[28:32], "big")
    tid = data[32 : 32 + tid_length]
    assert tid[0] == 0x45
    assert tid[4:].rstrip(b"\x00") == NEXUS_A.initiator_port.encode()
    assert len(tid[4:]) % 4 == 0


def test_persistent_reserve_in_unknown_service_action_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    for action in (4, 0x1F):
        assert sense_of(execute(lu, prin(action))) == (5, 0x24, 0x00)


def test_persistent_reserve_out_with_wrong_parameter_length_is_parameter_list_length_error() -> (
    None
):
    lu, _ = make_lu()
    cdb = struct.pack(">BBBxxIB", 0x5F, REGISTER, 0, 20, 0)
    assert sense_of(execute(lu, cdb, bytes(20))) == (5, 0x1A, 0x00)


def test_persistent_reserve_out_with_aptpl_is_invalid_field_in_parameter_list() -> None:
    lu, _ = make_lu()
    cdb, data = prout(REGISTER, 0, 5, flags=0x01)
    assert sense_of(execute(lu, cdb, data)) == (5, 0x26, 0x00)


def test_persistent_reserve_out_register_and_move_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    cdb, data = prout(7, 0, 5)
    assert sense_of(execute(lu, cdb, data)) == (5, 0x24, 0x00)


def test_persistent_reserve_with_bad_type_or_scope_is_invalid_field_in_cdb() -> None:
    lu, _ = make_lu()
    register(lu, NEXUS_A, 5)
    cdb, data = prout(RESERVE, 5, 0, 2)
    assert sense_of(execute(lu, cdb, data)) == (5, 0x24, 0x00)
    cdb, data = prout(RESERVE, 5, 0, 0x11)
    assert sense_of(execute(lu, cdb, data)) == (5, 0x24, 0x00)
