"""CDB field decoders and LUN addressing."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reservoir.agent.scsi import LunTable, decode_lun, encode_lun
from reservoir.agent.scsi._cdb import (
    cdb_length,
    decode_rw6,
    decode_rw10,
    decode_rw12,
    decode_rw16,
    truncate,
    u16,
    u32,
    u64,
)
from reservoir.agent.scsi._luns import NO_LUN


def test_read6_transfer_length_zero_means_256_blocks() -> None:
    assert decode_rw6(bytes((0x08, 0x01, 0x02, 0x03, 0x00, 0x00))) == (0x010203, 256)


def test_read6_lba_uses_only_21_bits() -> None:
    assert decode_rw6(bytes((0x08, 0xFF, 0xFF, 0xFF, 0x01, 0x00))) == (0x1FFFFF, 1)


@given(st.integers(0, 255), st.integers(0, 2**32 - 1), st.integers(0, 0xFFFF))
def test_decode_rw10_returns_flags_lba_and_length(flags: int, lba: int, blocks: int) -> None:
    cdb = struct.pack(">BBIBHB", 0x28, flags, lba, 0x1F, blocks, 0)
    assert decode_rw10(cdb) == (flags, lba, blocks)


@given(st.integers(0, 255), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_decode_rw12_returns_flags_lba_and_length(flags: int, lba: int, blocks: int) -> None:
    cdb = struct.pack(">BBIIBB", 0xA8, flags, lba, blocks, 0, 0)
    assert decode_rw12(cdb) == (flags, lba, blocks)


@given(st.integers(0, 255), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1))
def test_decode_rw16_returns_flags_lba_and_length(flags: int, lba: int, blocks: int) -> None:
    cdb = struct.pack(">BBQIBB", 0x88, flags, lba, blocks, 0, 0)
    assert decode_rw16(cdb) == (flags, lba, blocks)


def test_decode_rw16_of_short_cdb_raises_struct_error() -> None:
    with pytest.raises(struct.error):
        decode_rw16(bytes(10))


@given(st.binary(min_size=8, max_size=8))
def test_big_endian_helpers_agree_with_int_from_bytes(raw: bytes) -> None:
    assert u16(raw, 0) == int.from_bytes(raw[:2], "big")
    assert u32(raw, 4) == int.from_bytes(raw[4:], "big")
    assert u64(raw, 0) == int.from_bytes(raw, "big")


def test_cdb_length_follows_the_group_code() -> None:
    assert [cdb_length(code) for code in (0x00, 0x28, 0x5E, 0x88, 0xA0)] == [6, 10, 10, 16, 12]


def test_truncate_cuts_to_allocation_length_only_when_longer() -> None:
    assert truncate(b"abcdef", 4) == b"abcd"
    assert truncate(b"ab", 4) == b"ab"


def test_encode_lun_uses_peripheral_addressing_below_256() -> None:
    assert encode_lun(5) == b"\x00\x05" + bytes(6)


def test_encode_lun_uses_flat_addressing_from_256() -> None:
    assert encode_lun(0x123) == b"\x41\x23" + bytes(6)


def test_encode_lun_rejects_unaddressable_values() -> None:
    with pytest.raises(ValueError, match="not addressable"):
        encode_lun(0x4000)


@given(st.integers(0, 0x3FFF))
def test_lun_encoding_round_trips(lun: int) -> None:
    assert decode_lun(encode_lun(lun)) == lun
    assert LunTable.decode_lun(LunTable.encode_lun(lun)) == lun


def test_decode_lun_of_multi_level_address_matches_no_unit() -> None:
    assert decode_lun(b"\x00\x01\x00\x02" + bytes(4)) == NO_LUN


def test_decode_lun_of_peripheral_bus_address_matches_no_unit() -> None:
    assert decode_lun(b"\x01\x01" + bytes(6)) == NO_LUN


def test_decode_lun_of_extended_addressing_matches_no_unit() -> None:
    assert decode_lun(b"\xc1\x01" + bytes(6)) == NO_LUN


@given(st.binary(min_size=0, max_size=8))
def test_decode_lun_never_raises(field: bytes) -> None:
    assert -1 <= decode_lun(field) <= 0x3FFF
