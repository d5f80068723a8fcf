"""The IPG <-> rate converter of design 3.3 (Data Reservoir's e1000 gap widening)."""

from __future__ import annotations

import math

import pytest

from reservoir.pacing.ipg import (
    E1000_MAX_GAP,
    PREAMBLE_AND_GAP,
    gap_from_rate,
    rate_from_gap,
)

GBIT = 1_000_000_000


def test_paper_gap_of_1023_byte_times_on_1500_byte_frames_at_1_gbit() -> None:
    # By hand: every frame takes 1500 + 20 = 1520 byte times, widened by 1023
    # to 2543, so the NIC runs at 1520 / 2543 of 1 Gbit/s = 597.7 Mbit/s.
    rate = rate_from_gap(E1000_MAX_GAP, 1500, GBIT)
    assert rate == pytest.approx(1e9 * 1520 / 2543)
    assert rate == pytest.approx(597_719_229, abs=1)


def test_no_extra_gap_is_line_rate() -> None:
    assert rate_from_gap(0, 1500, GBIT) == GBIT


def test_gap_for_half_rate_doubles_the_slot() -> None:
    assert gap_from_rate(GBIT / 2, 1500, GBIT) == pytest.approx(1500 + PREAMBLE_AND_GAP)


@pytest.mark.parametrize("frame", [64, 1500, 1518, 9000])
@pytest.mark.parametrize("gap", [0.0, 1.0, 96.5, 1023.0, 50_000.0])
def test_gap_to_rate_to_gap_round_trip(frame: int, gap: float) -> None:
    rate = rate_from_gap(gap, frame, 10 * GBIT)
    assert gap_from_rate(rate, frame, 10 * GBIT) == pytest.approx(gap, abs=1e-6)


@pytest.mark.parametrize("rate", [1e6, 123_456_789.0, 940e6, 1e9])
def test_rate_to_gap_to_rate_round_trip(rate: float) -> None:
    gap = gap_from_rate(rate, 1500, GBIT)
    assert rate_from_gap(gap, 1500, GBIT) == pytest.approx(rate)


def test_ceil_of_the_gap_gives_a_rate_at_or_below_the_target() -> None:
    gap = math.ceil(gap_from_rate(600e6, 1500, GBIT))
    assert rate_from_gap(gap, 1500, GBIT) <= 600e6


@pytest.mark.parametrize(
    ("gap", "frame", "line", "match"),
    [
        (-1, 1500, GBIT, "extra gap must be"),
        (math.nan, 1500, GBIT, "extra gap must be"),
        (math.inf, 1500, GBIT, "extra gap must be"),
        (10, 63, GBIT, "frame size must be 64..65535"),
        (10, 70_000, GBIT, "frame size must be 64..65535"),
        (10, 1500.0, GBIT, "integer number of bytes"),
        (10, True, GBIT, "integer number of bytes"),
        (10, 1500, 0, "line rate must be"),
        (10, 1500, -1e9, "line rate must be"),
        (10, 1500, math.inf, "line rate must be"),
    ],
)
def test_rate_from_gap_rejects_bad_input(gap: float, frame: int, line: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        rate_from_gap(gap, frame, line)


@pytest.mark.parametrize(
    ("rate", "match"),
    [
        (0, "rate must be"),
        (-5e6, "rate must be"),
        (math.nan, "rate must be"),
        (2e9, "above the line rate"),
    ],
)
def test_gap_from_rate_rejects_bad_rates(rate: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        gap_from_rate(rate, 1500, GBIT)
