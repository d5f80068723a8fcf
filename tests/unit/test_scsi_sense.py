"""Sense data bytes (SPC-4 4.5) and the exception-to-result path."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reservoir.agent.scsi import SenseKey, Status, build_sense, decode_sense, sense_information
from reservoir.agent.scsi._sense import (
    CheckConditionError,
    descriptor_sense,
    field_pointer,
    fixed_sense,
    invalid_field_in_cdb,
    miscompare,
)

keys = st.integers(min_value=0, max_value=15)
codes = st.integers(min_value=0, max_value=255)


def test_fixed_sense_layout_is_response_code_70_key_byte2_length10_asc_byte12_ascq_byte13() -> None:
    sense = fixed_sense(SenseKey.ILLEGAL_REQUEST, 0x24, 0x00)
    assert len(sense) == 18
    assert sense[0] == 0x70
    assert sense[2] == 0x05
    assert sense[7] == 10
    assert (sense[12], sense[13]) == (0x24, 0x00)
    assert sense[3:7] == bytes(4)


def test_fixed_sense_with_information_sets_valid_bit_and_big_endian_field() -> None:
    sense = fixed_sense(SenseKey.MISCOMPARE, 0x1D, 0x00, information=0x01020304)
    assert sense[0] == 0xF0
    assert sense[2] == 0x0E
    assert sense[3:7] == b"\x01\x02\x03\x04"


def test_fixed_sense_information_beyond_32_bits_leaves_valid_clear() -> None:
    sense = fixed_sense(SenseKey.MEDIUM_ERROR, 0x11, 0x00, information=1 << 40)
    assert sense[0] == 0x70
    assert sense_information(sense) is None


def test_fixed_sense_field_pointer_occupies_bytes_15_to_17_with_sksv() -> None:
    sense = fixed_sense(SenseKey.ILLEGAL_REQUEST, 0x24, 0x00, sks=field_pointer(2, 5))
    assert sense[15] == 0x80 | 0x40 | 0x08 | 5
    assert sense[16:18] == b"\x00\x02"


def test_field_pointer_into_parameter_list_clears_cd_bit() -> None:
    assert field_pointer(20, None, in_cdb=False) == b"\x80\x00\x14"


def test_descriptor_sense_has_response_code_72_and_information_descriptor() -> None:
    sense = descriptor_sense(SenseKey.MISCOMPARE, 0x1D, 0x00, information=27)
    assert sense[:4] == b"\x72\x0e\x1d\x00"
    assert sense[7] == 12
    assert sense[8:12] == b"\x00\x0a\x80\x00"
    assert int.from_bytes(sense[12:20], "big") == 27


def test_descriptor_sense_carries_sense_key_specific_descriptor() -> None:
    sense = descriptor_sense(SenseKey.ILLEGAL_REQUEST, 0x24, 0, sks=field_pointer(1, 7))
    assert sense[8:12] == b"\x02\x06\x00\x00"
    assert sense[12:15] == field_pointer(1, 7)


def test_build_sense_selects_descriptor_format_on_request() -> None:
    assert build_sense(5, 0x20, 0)[0] == 0x70
    assert build_sense(5, 0x20, 0, descriptor=True)[0] == 0x72


def test_decode_sense_rejects_unknown_response_codes() -> None:
    for bad in (b"", b"\x71\x00", b"\x7f" + bytes(20)):
        try:
            decode_sense(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} decoded")


def test_scsi_error_result_is_check_condition_with_its_sense() -> None:
    result = invalid_field_in_cdb(1, 7).result()
    assert result.status == Status.CHECK_CONDITION
    assert decode_sense(result.sense) == (5, 0x24, 0x00)
    assert result.data_in == b""


def test_miscompare_error_reports_offset_in_information() -> None:
    result = miscompare(4090).result()
    assert decode_sense(result.sense) == (0x0E, 0x1D, 0x00)
    assert sense_information(result.sense) == 4090


def test_scsi_error_in_descriptor_format_keeps_information() -> None:
    error = CheckConditionError(SenseKey.MEDIUM_ERROR, (0x11, 0x00), information=1 << 40)
    assert sense_information(error.result(descriptor=True).sense) == 1 << 40


@given(keys, codes, codes, st.none() | st.integers(min_value=0, max_value=2**32 - 1))
def test_fixed_sense_round_trips_key_asc_ascq_information(
    key: int, asc: int, ascq: int, info: int | None
) -> None:
    sense = fixed_sense(key, asc, ascq, information=info)
    assert decode_sense(sense) == (key, asc, ascq)
    assert sense_information(sense) == info


@given(keys, codes, codes, st.none() | st.integers(min_value=0, max_value=2**64 - 1))
def test_descriptor_sense_round_trips_key_asc_ascq_information(
    key: int, asc: int, ascq: int, info: int | None
) -> None:
    sense = descriptor_sense(key, asc, ascq, information=info)
    assert decode_sense(sense) == (key, asc, ascq)
    assert sense_information(sense) == info
    assert sense[7] == len(sense) - 8


@given(st.integers(min_value=0, max_value=0xFFFF), st.none() | st.integers(0, 7))
def test_field_pointer_encodes_byte_and_bit(byte: int, bit: int | None) -> None:
    sks = field_pointer(byte, bit)
    assert sks[0] & 0xC0 == 0xC0
    assert int.from_bytes(sks[1:], "big") == byte
    assert bool(sks[0] & 0x08) == (bit is not None)
    if bit is not None:
        assert sks[0] & 0x07 == bit
