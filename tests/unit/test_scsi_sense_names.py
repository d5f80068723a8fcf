"""Status and sense in words, as the initiator's errors say them."""

from __future__ import annotations

import pytest

from reservoir.agent.initiator import ScsiError
from reservoir.agent.scsi import build_sense, describe_sense, describe_status


@pytest.mark.parametrize(
    ("key", "asc", "ascq", "words"),
    [
        (0x5, 0x25, 0x00, "ILLEGAL REQUEST, LOGICAL UNIT NOT SUPPORTED"),
        (0x7, 0x27, 0x07, "DATA PROTECT, SPACE ALLOCATION FAILED WRITE PROTECT"),
        (0x3, 0x11, 0x00, "MEDIUM ERROR, UNRECOVERED READ ERROR"),
        (0xB, 0x47, 0x77, "ABORTED COMMAND"),
        (0x6, 0x00, 0x00, "UNIT ATTENTION"),
        (0xC, 0x25, 0x00, "LOGICAL UNIT NOT SUPPORTED"),
        (0xF, 0x99, 0x01, ""),
    ],
)
def test_a_sense_is_said_in_words_with_its_numbers(
    key: int, asc: int, ascq: int, words: str
) -> None:
    numbers = f"sense key 0x{key:x}, ASC/ASCQ 0x{asc:02x}/0x{ascq:02x}"
    assert describe_sense(key, asc, ascq) == (f"{words} ({numbers})" if words else numbers)


def test_a_status_is_named_and_only_check_condition_carries_its_sense() -> None:
    assert describe_status(0x18) == "RESERVATION CONFLICT"
    assert describe_status(0x08, (0x5, 0x24, 0x00)) == "BUSY"
    assert describe_status(0x99) == "status 0x99"
    assert describe_status(0x02, (0x5, 0x24, 0x00)) == (
        "CHECK CONDITION: ILLEGAL REQUEST, INVALID FIELD IN CDB (sense key 0x5, ASC/ASCQ 0x24/0x00)"
    )


@pytest.mark.parametrize("descriptor", [False, True])
def test_the_initiator_s_scsi_error_says_its_sense_in_words(descriptor: bool) -> None:
    sense = build_sense(0x5, 0x25, 0x00, descriptor=descriptor)
    assert str(ScsiError(0x02, sense)) == (
        "CHECK CONDITION: ILLEGAL REQUEST, LOGICAL UNIT NOT SUPPORTED "
        "(sense key 0x5, ASC/ASCQ 0x25/0x00)"
    )
