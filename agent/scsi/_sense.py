"""Sense data (SPC-4 4.5): fixed (70h) and descriptor (72h) formats, and the
exception the command handlers raise to end a command with CHECK CONDITION."""

from __future__ import annotations

from enum import IntEnum
from typing import Final

from reservoir.common.errors import ReservoirError

from ._types import ScsiResult, Status


class SenseKey(IntEnum):
    """SPC-4 table 27."""

    NO_SENSE = 0x0
    RECOVERED_ERROR = 0x1
    NOT_READY = 0x2
    MEDIUM_ERROR = 0x3
    HARDWARE_ERROR = 0x4
    ILLEGAL_REQUEST = 0x5
    UNIT_ATTENTION = 0x6
    DATA_PROTECT = 0x7
    BLANK_CHECK = 0x8
    VENDOR_SPECIFIC = 0x9
    COPY_ABORTED = 0xA
    ABORTED_COMMAND = 0xB
    VOLUME_OVERFLOW = 0xD
    MISCOMPARE = 0xE


# Additional sense code / qualifier pairs (SPC-4 table 28) used by this target.
NO_ADDITIONAL_SENSE: Final = (0x00, 0x00)
WRITE_ERROR: Final = (0x0C, 0x00)
INVALID_FIELD_IN_COMMAND_IU: Final = (0x0E, 0x03)
UNRECOVERED_READ_ERROR: Final = (0x11, 0x00)
PARAMETER_LIST_LENGTH_ERROR: Final = (0x1A, 0x00)
MISCOMPARE_DURING_VERIFY: Final = (0x1D, 0x00)
INVALID_COMMAND_OPERATION_CODE: Final = (0x20, 0x00)
LBA_OUT_OF_RANGE: Final = (0x21, 0x00)
INVALID_FIELD_IN_CDB: Final = (0x24, 0x00)
LOGICAL_UNIT_NOT_SUPPORTED: Final = (0x25, 0x00)
INVALID_FIELD_IN_PARAMETER_LIST: Final = (0x26, 0x00)
INVALID_RELEASE_OF_PERSISTENT_RESERVATION: Final = (0x26, 0x04)
WRITE_PROTECTED: Final = (0x27, 0x00)
SOFTWARE_WRITE_PROTECTED: Final = (0x27, 0x02)
SPACE_ALLOCATION_FAILED_WRITE_PROTECT: Final = (0x27, 0x07)
POWER_ON_RESET: Final = (0x29, 0x00)
BUS_DEVICE_RESET_FUNCTION_OCCURRED: Final = (0x29, 0x03)
MODE_PARAMETERS_CHANGED: Final = (0x2A, 0x01)
RESERVATIONS_PREEMPTED: Final = (0x2A, 0x03)
RESERVATIONS_RELEASED: Final = (0x2A, 0x04)
REGISTRATIONS_PREEMPTED: Final = (0x2A, 0x05)
CAPACITY_DATA_HAS_CHANGED: Final = (0x2A, 0x09)
SAVING_PARAMETERS_NOT_SUPPORTED: Final = (0x39, 0x00)
INTERNAL_TARGET_FAILURE: Final = (0x44, 0x00)

FIXED_SENSE_LENGTH: Final = 18


def field_pointer(byte: int, bit: int | None = None, *, in_cdb: bool = True) -> bytes:
    """The 3-byte sense-key specific field pointer (SPC-4 4.5.2.4.2)."""
    first = 0x80 | (0x40 if in_cdb else 0)
    if bit is not None:
        first |= 0x08 | (bit & 0x07)
    return bytes((first, (byte >> 8) & 0xFF, byte & 0xFF))


def fixed_sense(
    key: int, asc: int, ascq: int, *, information: int | None = None, sks: bytes | None = None
) -> bytes:
    """Fixed format sense data, response code 70h (SPC-4 4.5.3).

    INFORMATION only fits 32 bits here; a larger value leaves VALID clear.
    """
    buf = bytearray(FIXED_SENSE_LENGTH)
    buf[0] = 0x70
    if information is not None and 0 <= information <= 0xFFFFFFFF:
        buf[0] = 0xF0
        buf[3:7] = information.to_bytes(4, "big")
    buf[2] = key & 0x0F
    buf[7] = FIXED_SENSE_LENGTH - 8
    buf[12] = asc
    buf[13] = ascq
    if sks is not None:
        buf[15:18] = sks
    return bytes(buf)


def descriptor_sense(
    key: int, asc: int, ascq: int, *, information: int | None = None, sks: bytes | None = None
) -> bytes:
    """Descriptor format sense data, response code 72h (SPC-4 4.5.2)."""
    descriptors = bytearray()
    if information is not None:
        descriptors += b"\x00\x0a\x80\x00" + (information & (2**64 - 1)).to_bytes(8, "big")
    if sks is not None:
        descriptors += b"\x02\x06\x00\x00" + sks + b"\x00"
    header = bytes((0x72, key & 0x0F, asc, ascq, 0, 0, 0, len(descriptors)))
    return header + bytes(descriptors)


def build_sense(
    key: int,
    asc: int,
    ascq: int,
    *,
    descriptor: bool = False,
    information: int | None = None,
    sks: bytes | None = None,
) -> bytes:
    """Sense data in the format the Control mode page's D_SENSE bit selects."""
    make = descriptor_sense if descriptor else fixed_sense
    return make(key, asc, ascq, information=information, sks=sks)


def decode_sense(sense: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(sense key, ASC, ASCQ) of fixed or descriptor format sense data."""
    if len(sense) < 4:
        raise ValueError("sense data too short")
    code = sense[0] & 0x7F
    if code in (0x72, 0x73):
        return sense[1] & 0x0F, sense[2], sense[3]
    if code in (0x70, 0x71) and len(sense) >= 14:
        return sense[2] & 0x0F, sense[12], sense[13]
    raise ValueError(f"unknown sense response code {code:#x}")


def sense_information(sense: bytes | bytearray | memoryview) -> int | None:
    """The INFORMATION field when it is valid, else None."""
    code = sense[0] & 0x7F
    if code in (0x70, 0x71):
        return int.from_bytes(sense[3:7], "big") if sense[0] & 0x80 else None
    pos = 8
    while pos + 1 < len(sense):
        kind, length = sense[pos], sense[pos + 1]
        if kind == 0x00 and length >= 0x0A and sense[pos + 2] & 0x80:
            return int.from_bytes(sense[pos + 4 : pos + 12], "big")
        pos += 2 + length
    return None


def check_condition(
    key: int,
    code: tuple[int, int],
    *,
    descriptor: bool = False,
    information: int | None = None,
    sks: bytes | None = None,
) -> ScsiResult:
    """A CHECK CONDITION result carrying the given sense."""
    sense = build_sense(
        key, code[0], code[1], descriptor=descriptor, information=information, sks=sks
    )
    return ScsiResult(Status.CHECK_CONDITION, b"", sense)


class CheckConditionError(ReservoirError):
    """Ends the current command with CHECK CONDITION and this sense: the SCSI layer's
    one error (the target answers it with the sense data, never a lost connection).

    ::

        CheckConditionError   sense key, ASC/ASCQ, and the field it points at
    """

    def __init__(
        self,
        key: int,
        code: tuple[int, int],
        *,
        information: int | None = None,
        sks: bytes | None = None,
    ) -> None:
        super().__init__(f"sense {key:#x}/{code[0]:02x}/{code[1]:02x}")
        self.key = key
        self.code = code
        self.information = information
        self.sks = sks

    def result(self, descriptor: bool = False) -> ScsiResult:
        return check_condition(
            self.key, self.code, descriptor=descriptor, information=self.information, sks=self.sks
        )


def invalid_field_in_cdb(byte: int, bit: int | None = None) -> CheckConditionError:
    return CheckConditionError(
        SenseKey.ILLEGAL_REQUEST, INVALID_FIELD_IN_CDB, sks=field_pointer(byte, bit)
    )


def invalid_field_in_parameters(byte: int, bit: int | None = None) -> CheckConditionError:
    return CheckConditionError(
        SenseKey.ILLEGAL_REQUEST,
        INVALID_FIELD_IN_PARAMETER_LIST,
        sks=field_pointer(byte, bit, in_cdb=False),
    )


def parameter_list_length_error() -> CheckConditionError:
    return CheckConditionError(SenseKey.ILLEGAL_REQUEST, PARAMETER_LIST_LENGTH_ERROR)


def invalid_opcode() -> CheckConditionError:
    return CheckConditionError(SenseKey.ILLEGAL_REQUEST, INVALID_COMMAND_OPERATION_CODE)


def lba_out_of_range() -> CheckConditionError:
    return CheckConditionError(SenseKey.ILLEGAL_REQUEST, LBA_OUT_OF_RANGE)


def data_out_mismatch() -> CheckConditionError:
    """The Data-Out buffer does not hold what the CDB describes (SAM-5 ASC 0E/03)."""
    return CheckConditionError(SenseKey.ILLEGAL_REQUEST, INVALID_FIELD_IN_COMMAND_IU)


def write_protected(software: bool = False) -> CheckConditionError:
    return CheckConditionError(
        SenseKey.DATA_PROTECT, SOFTWARE_WRITE_PROTECTED if software else WRITE_PROTECTED
    )


def miscompare(offset: int) -> CheckConditionError:
    """SBC-3 5.2 / 5.22: INFORMATION holds the offset of the first differing byte."""
    return CheckConditionError(SenseKey.MISCOMPARE, MISCOMPARE_DURING_VERIFY, information=offset)
