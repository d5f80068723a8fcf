"""LogicalUnit.read_cached: the page-cache fast path answers only plain READs
that the full path would answer GOOD with the same data."""

from __future__ import annotations

import struct

from test_scsi_support import (
    NEXUS_A,
    NEXUS_B,
    TARGET,
    MemoryBackend,
    execute,
    prout,
    read10,
    read16,
)

from reservoir.agent.scsi import LogicalUnit


class CachedBackend(MemoryBackend):
    """A MemoryBackend whose data is all 'in the page cache' unless told otherwise."""

    cached = True

    def read_cached(self, offset: int, length: int) -> bytes | None:
        return bytes(self.data[offset : offset + length]) if self.cached else None


def _lu() -> tuple[LogicalUnit, CachedBackend]:
    backend = CachedBackend(2048, 512)
    backend.data[:4096] = bytes(range(256)) * 16
    lu = LogicalUnit(backend, lun=0, serial="SN1", target_name=TARGET, ua_on_new_nexus=False)
    execute(lu, bytes(6))  # the nexus is seen
    return lu, backend


def test_plain_read10_and_read16_match_the_full_path() -> None:
    lu, _ = _lu()
    for cdb in (read10(2, 4), read16(2, 4)):
        fast = lu.read_cached(NEXUS_A, cdb)
        full = execute(lu, cdb)
        assert full.status == 0 and fast is not None and bytes(fast) == full.data_in


def test_a_read10_in_the_16_byte_cdb_field_of_an_iscsi_command_is_served_at_once() -> None:
    """iSCSI carries every CDB of up to 16 bytes in a 16-byte field, zero-padded: a
    READ(10) arrives as 16 bytes (the Linux initiator's usual read)."""
    lu, _ = _lu()
    cdb = read10(2, 4).ljust(16, b"\0")
    fast = lu.read_cached(NEXUS_A, cdb)
    full = execute(lu, cdb)
    assert full.status == 0 and fast is not None and bytes(fast) == full.data_in


def test_data_not_in_cache_takes_the_full_path() -> None:
    lu, backend = _lu()
    backend.cached = False
    assert lu.read_cached(NEXUS_A, read10(0, 1)) is None


def test_flags_group_or_control_bits_take_the_full_path() -> None:
    lu, _ = _lu()
    assert lu.read_cached(NEXUS_A, read10(0, 1, flags=0x08)) is None  # FUA
    group = bytearray(read10(0, 1))
    group[6] = 1
    assert lu.read_cached(NEXUS_A, bytes(group)) is None
    control = bytearray(read16(0, 1))
    control[15] = 0x04
    assert lu.read_cached(NEXUS_A, bytes(control)) is None


def test_out_of_range_and_zero_length_take_the_full_path() -> None:
    lu, _ = _lu()
    assert lu.read_cached(NEXUS_A, read16(2047, 2)) is None
    assert lu.read_cached(NEXUS_A, read10(0, 0)) is None


def test_other_opcodes_take_the_full_path() -> None:
    lu, _ = _lu()
    assert lu.read_cached(NEXUS_A, struct.pack(">BBIBHB", 0x2F, 0, 0, 0, 1, 0)) is None  # VERIFY
    assert lu.read_cached(NEXUS_A, b"") is None


def test_a_pending_unit_attention_takes_the_full_path() -> None:
    lu, _ = _lu()
    lu.reset(None)
    assert lu.read_cached(NEXUS_A, read10(0, 1)) is None


def test_a_nexus_not_seen_yet_takes_the_full_path() -> None:
    lu, _ = _lu()
    assert lu.read_cached(NEXUS_B, read10(0, 1)) is None


def test_an_active_reservation_takes_the_full_path() -> None:
    lu, _ = _lu()
    cdb, data = prout(0x00, 0, 0xABC)  # REGISTER key 0xabc
    assert execute(lu, cdb, data).status == 0
    cdb, data = prout(0x01, 0xABC, 0, pr_type=0x03)  # RESERVE exclusive access
    assert execute(lu, cdb, data).status == 0
    assert lu.read_cached(NEXUS_A, read10(0, 1)) is None
