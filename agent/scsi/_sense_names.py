"""Status and sense in words (SAM-5 5.3, SPC-4 tables 27 and 28), for messages:
``describe_status(0x02, (0x5, 0x25, 0x00))`` -> "CHECK CONDITION: ILLEGAL REQUEST,
LOGICAL UNIT NOT SUPPORTED (sense key 0x5, ASC/ASCQ 0x25/0x00)"."""

from __future__ import annotations

from enum import IntEnum
from typing import Final

from ._sense import SenseKey
from ._types import Status

# The pairs this target raises and those a remote target is likely to answer a copy with.
ASC_NAMES: Final[dict[tuple[int, int], str]] = {
    (0x00, 0x00): "NO ADDITIONAL SENSE INFORMATION",
    (0x04, 0x00): "LOGICAL UNIT NOT READY, CAUSE NOT REPORTABLE",
    (0x04, 0x01): "LOGICAL UNIT IS IN PROCESS OF BECOMING READY",
    (0x04, 0x02): "LOGICAL UNIT NOT READY, INITIALIZING COMMAND REQUIRED",
    (0x04, 0x03): "LOGICAL UNIT NOT READY, MANUAL INTERVENTION REQUIRED",
    (0x04, 0x0A): "LOGICAL UNIT NOT ACCESSIBLE, ASYMMETRIC ACCESS STATE TRANSITION",
    (0x04, 0x0B): "LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN STANDBY STATE",
    (0x04, 0x0C): "LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN UNAVAILABLE STATE",
    (0x0C, 0x00): "WRITE ERROR",
    (0x0E, 0x03): "INVALID FIELD IN COMMAND INFORMATION UNIT",
    (0x11, 0x00): "UNRECOVERED READ ERROR",
    (0x1A, 0x00): "PARAMETER LIST LENGTH ERROR",
    (0x1D, 0x00): "MISCOMPARE DURING VERIFY OPERATION",
    (0x20, 0x00): "INVALID COMMAND OPERATION CODE",
    (0x21, 0x00): "LOGICAL BLOCK ADDRESS OUT OF RANGE",
    (0x24, 0x00): "INVALID FIELD IN CDB",
    (0x25, 0x00): "LOGICAL UNIT NOT SUPPORTED",
    (0x26, 0x00): "INVALID FIELD IN PARAMETER LIST",
    (0x26, 0x04): "INVALID RELEASE OF PERSISTENT RESERVATION",
    (0x27, 0x00): "WRITE PROTECTED",
    (0x27, 0x02): "LOGICAL UNIT SOFTWARE WRITE PROTECTED",
    (0x27, 0x07): "SPACE ALLOCATION FAILED WRITE PROTECT",
    (0x29, 0x00): "POWER ON, RESET, OR BUS DEVICE RESET OCCURRED",
    (0x29, 0x03): "BUS DEVICE RESET FUNCTION OCCURRED",
    (0x2A, 0x01): "MODE PARAMETERS CHANGED",
    (0x2A, 0x03): "RESERVATIONS PREEMPTED",
    (0x2A, 0x04): "RESERVATIONS RELEASED",
    (0x2A, 0x05): "REGISTRATIONS PREEMPTED",
    (0x2A, 0x09): "CAPACITY DATA HAS CHANGED",
    (0x2C, 0x00): "COMMAND SEQUENCE ERROR",
    (0x31, 0x00): "MEDIUM FORMAT CORRUPTED",
    (0x39, 0x00): "SAVING PARAMETERS NOT SUPPORTED",
    (0x3A, 0x00): "MEDIUM NOT PRESENT",
    (0x3F, 0x0E): "REPORTED LUNS DATA HAS CHANGED",
    (0x44, 0x00): "INTERNAL TARGET FAILURE",
    (0x47, 0x00): "SCSI PARITY ERROR",
    (0x55, 0x03): "INSUFFICIENT RESOURCES",
}


def describe_sense(key: int, asc: int, ascq: int) -> str:
    """``ILLEGAL REQUEST, LOGICAL UNIT NOT SUPPORTED (sense key 0x5, ASC/ASCQ
    0x25/0x00)``; a pair or key not in the tables is left as its numbers."""
    words = [name] if (name := _name(SenseKey, key)) else []
    if (asc, ascq) in ASC_NAMES and (asc, ascq) != (0, 0):
        words.append(ASC_NAMES[asc, ascq])
    numbers = f"sense key 0x{key:x}, ASC/ASCQ 0x{asc:02x}/0x{ascq:02x}"
    return f"{', '.join(words)} ({numbers})" if words else numbers


def describe_status(status: int, sense: tuple[int, int, int] | None = None) -> str:
    """A command's status in words, with its sense (CHECK CONDITION) where given."""
    name = _name(Status, status) or f"status 0x{status:02x}"
    if sense is None or status != Status.CHECK_CONDITION:
        return name
    return f"{name}: {describe_sense(*sense)}"


def _name(names: type[IntEnum], value: int) -> str | None:
    try:
        return names(value).name.replace("_", " ")
    except ValueError:
        return None
