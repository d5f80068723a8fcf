"""Which unit attentions make a copy read its destination's reservations again
(agent/transfer/_hold_watch.py); the integration tests act them out on a real target."""

from __future__ import annotations

import pytest

from reservoir.agent.initiator import ScsiError
from reservoir.agent.scsi import build_sense
from reservoir.agent.transfer._hold_watch import Lapse, shaken_by


def attention(asc: int, ascq: int) -> ScsiError:
    return ScsiError(0x02, build_sense(0x6, asc, ascq))


@pytest.mark.parametrize(
    ("asc", "ascq", "words"),
    [
        (0x29, 0x00, "the target restarted or was reset"),
        (0x29, 0x07, "the target restarted or was reset"),
        (0x2A, 0x03, "another initiator cleared or preempted the reservation"),
        (0x2A, 0x05, "another initiator preempted the copy's registrations"),
    ],
)
def test_a_reset_or_a_preemption_shakes_the_hold(asc: int, ascq: int, words: str) -> None:
    code = f"unit attention {asc:02X}h/{ascq:02X}h"
    assert shaken_by(attention(asc, ascq)) == f"{words} ({code})"


@pytest.mark.parametrize(
    ("asc", "ascq"),
    [(0x2A, 0x04), (0x2A, 0x01), (0x2A, 0x09), (0x3F, 0x0E), (0x00, 0x00)],
)
def test_the_copy_s_own_release_and_other_news_do_not(asc: int, ascq: int) -> None:
    """RESERVATIONS RELEASED comes only from the holder, which is the copy itself."""
    assert shaken_by(attention(asc, ascq)) is None


def test_a_lapse_says_when_and_why() -> None:
    lapse = Lapse(1.8149, 7.0, "the target restarted or was reset (unit attention 29h/00h)")
    assert lapse.describe() == (
        "not held from 1.81 s to 7.00 s "
        "(the target restarted or was reset (unit attention 29h/00h))"
    )


def test_a_lapse_before_this_run_says_it_was_between_runs() -> None:
    lapse = Lapse(None, 0.01, "found unreserved when this run began")
    assert lapse.describe() == (
        "not held between the run before and this one (found unreserved when this run began)"
    )
