"""RAID-0 striping (reservoir.common.striping) against a set laid out byte by byte."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reservoir.common.striping import locate, member_ends, striped_capacity, unit_end


def laid_out(length: int, unit: int, members: int) -> list[list[int]]:
    """Each member's logical bytes, in order: stripes dealt round-robin."""
    held: list[list[int]] = [[] for _ in range(members)]
    for stripe_start in range(0, length, unit):
        held[(stripe_start // unit) % members].extend(
            range(stripe_start, min(length, stripe_start + unit))
        )
    return held


@given(st.integers(1, 7), st.integers(1, 5), st.integers(1, 60))
def test_every_byte_is_where_locate_says(unit: int, members: int, length: int) -> None:
    held = laid_out(length, unit, members)
    for member, logical in enumerate(held):
        for at, x in enumerate(logical):
            assert locate(x, unit, members) == (member, at)


@given(st.integers(1, 7), st.integers(1, 5), st.integers(0, 40), st.integers(1, 40))
def test_member_ends_is_the_furthest_byte_of_the_range_on_each_member(
    unit: int, members: int, offset: int, length: int
) -> None:
    want = [0] * members
    for x in range(offset, offset + length):
        member, at = locate(x, unit, members)
        want[member] = max(want[member], at + 1)
    assert member_ends(offset, length, unit, members) == want


def test_a_unit_ends_at_the_next_multiple_and_capacity_is_whole_units() -> None:
    assert [unit_end(x, 4) for x in (0, 3, 4, 7)] == [4, 4, 8, 8]
    assert striped_capacity([10, 7, 9], 3) == 3 * 6
    assert striped_capacity([], 3) == 0
