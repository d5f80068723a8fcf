"""Operation codes and CDB field decoders (SPC-4 4.2, SBC-3 5)."""

from __future__ import annotations

import struct
from typing import Final

# SPC-4 / SBC-3 operation codes handled by a disk logical unit.
TEST_UNIT_READY: Final = 0x00
REQUEST_SENSE: Final = 0x03
READ_6: Final = 0x08
WRITE_6: Final = 0x0A
INQUIRY: Final = 0x12
MODE_SELECT_6: Final = 0x15
RESERVE_6: Final = 0x16
RELEASE_6: Final = 0x17
MODE_SENSE_6: Final = 0x1A
START_STOP_UNIT: Final = 0x1B
PREVENT_ALLOW_MEDIUM_REMOVAL: Final = 0x1E
READ_CAPACITY_10: Final = 0x25
READ_10: Final = 0x28
WRITE_10: Final = 0x2A
WRITE_AND_VERIFY_10: Final = 0x2E
VERIFY_10: Final = 0x2F
PRE_FETCH_10: Final = 0x34
SYNCHRONIZE_CACHE_10: Final = 0x35
WRITE_SAME_10: Final = 0x41
UNMAP: Final = 0x42
LOG_SENSE: Final = 0x4D
MODE_SELECT_10: Final = 0x55
RESERVE_10: Final = 0x56
RELEASE_10: Final = 0x57
MODE_SENSE_10: Final = 0x5A
PERSISTENT_RESERVE_IN: Final = 0x5E
PERSISTENT_RESERVE_OUT: Final = 0x5F
READ_16: Final = 0x88
COMPARE_AND_WRITE: Final = 0x89
WRITE_16: Final = 0x8A
ORWRITE_16: Final = 0x8B
WRITE_AND_VERIFY_16: Final = 0x8E
VERIFY_16: Final = 0x8F
PRE_FETCH_16: Final = 0x90
SYNCHRONIZE_CACHE_16: Final = 0x91
WRITE_SAME_16: Final = 0x93
SERVICE_ACTION_IN_16: Final = 0x9E
REPORT_LUNS: Final = 0xA0
MAINTENANCE_IN: Final = 0xA3
READ_12: Final = 0xA8
WRITE_12: Final = 0xAA
WRITE_AND_VERIFY_12: Final = 0xAE
VERIFY_12: Final = 0xAF
# Vendor specific (C0h-FFh): a digest of an LBA range (see _hash_range.py).
HASH_RANGE: Final = 0xC1

# The commands that move a LUN's blocks to or from the initiator (the target counts
# their bytes): READ, and WRITE with WRITE AND VERIFY.
DATA_READS: Final = frozenset({READ_6, READ_10, READ_12, READ_16})
DATA_WRITES: Final = frozenset(
    {WRITE_6, WRITE_10, WRITE_12, WRITE_16}
    | {WRITE_AND_VERIFY_10, WRITE_AND_VERIFY_12, WRITE_AND_VERIFY_16}
)

# Service actions.
SA_READ_CAPACITY_16: Final = 0x10
SA_GET_LBA_STATUS: Final = 0x12
SA_REPORT_TARGET_PORT_GROUPS: Final = 0x0A
SA_REPORT_SUPPORTED_OPCODES: Final = 0x0C

# Precompiled layouts: (byte 1 flags, LBA, transfer length).
RW10: Final = struct.Struct(">xBIxH")
RW12: Final = struct.Struct(">xBII")
RW16: Final = struct.Struct(">xBQI")
CDB_LENGTH_BY_GROUP: Final = (6, 10, 10, 0, 16, 12, 0, 0)


def cdb_length(opcode: int) -> int:
    """The CDB length implied by the group code of an operation code (0 = vendor/variable)."""
    return CDB_LENGTH_BY_GROUP[opcode >> 5]


def decode_rw6(cdb: bytes) -> tuple[int, int]:
    """(LBA, blocks) of READ(6)/WRITE(6): a transfer length of 0 means 256 blocks."""
    lba = ((cdb[1] & 0x1F) << 16) | (cdb[2] << 8) | cdb[3]
    return lba, cdb[4] or 256


def decode_rw10(cdb: bytes) -> tuple[int, int, int]:
    """(byte-1 flags, LBA, blocks) of a 10-byte read/write/verify CDB."""
    flags, lba, blocks = RW10.unpack_from(cdb)
    return flags, lba, blocks


def decode_rw12(cdb: bytes) -> tuple[int, int, int]:
    """(byte-1 flags, LBA, blocks) of a 12-byte read/write/verify CDB."""
    flags, lba, blocks = RW12.unpack_from(cdb)
    return flags, lba, blocks


def decode_rw16(cdb: bytes) -> tuple[int, int, int]:
    """(byte-1 flags, LBA, blocks) of a 16-byte read/write/verify CDB."""
    flags, lba, blocks = RW16.unpack_from(cdb)
    return flags, lba, blocks


def u16(cdb: bytes | bytearray | memoryview, at: int) -> int:
    return (cdb[at] << 8) | cdb[at + 1]


def u32(cdb: bytes | bytearray | memoryview, at: int) -> int:
    return int.from_bytes(cdb[at : at + 4], "big")


def u64(cdb: bytes | bytearray | memoryview, at: int) -> int:
    return int.from_bytes(cdb[at : at + 8], "big")


def truncate(data: bytes | bytearray, allocation_length: int) -> bytes | bytearray:
    """Data-In limited to the allocation length (SPC-4 4.2.5.6)."""
    return data if len(data) <= allocation_length else data[:allocation_length]
