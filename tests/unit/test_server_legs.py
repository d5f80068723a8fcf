"""Level-1 striping of a transfer into legs: which server pair carries which bytes."""

from __future__ import annotations

import pytest

from reservoir.common.striping import striped_capacity
from reservoir.server.domain.errors import LayoutError
from reservoir.server.domain.leg_copies import extent_size
from reservoir.server.domain.legs import Leg, StripeLayout, compute_legs

MiB = 1 << 20


def layout(members: int, size: int = 64 * MiB, unit: int = MiB) -> StripeLayout:
    return StripeLayout([size] * members, unit)


def pairs(legs: list[Leg]) -> set[tuple[int, int]]:
    return {(leg.source, leg.dest) for leg in legs}


def test_capacity_is_members_times_smallest_in_whole_stripe_units() -> None:
    assert striped_capacity([10 * MiB, 7 * MiB + 5, 9 * MiB], MiB) == 3 * 7 * MiB
    assert striped_capacity([], MiB) == 0


def test_same_member_count_pairs_member_i_with_member_i() -> None:
    legs = compute_legs(layout(4), layout(4))
    assert [(leg.source, leg.dest) for leg in legs] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert {leg.bytes for leg in legs} == {64 * MiB}


def test_more_destinations_are_dealt_round_robin_over_sources() -> None:
    legs = compute_legs(layout(2, size=64 * MiB), layout(4, size=32 * MiB))
    assert pairs(legs) == {(0, 0), (1, 1), (0, 2), (1, 3)}
    assert {leg.bytes for leg in legs} == {32 * MiB}


def test_more_sources_than_destinations_share_each_destination() -> None:
    legs = compute_legs(layout(4), layout(2, size=128 * MiB))
    assert pairs(legs) == {(0, 0), (1, 1), (2, 0), (3, 1)}


def test_coprime_member_counts_use_every_pair() -> None:
    legs = compute_legs(layout(3, size=60 * MiB), layout(2, size=90 * MiB))
    assert pairs(legs) == {(s, d) for s in range(3) for d in range(2)}
    assert sum(leg.bytes for leg in legs) == 180 * MiB


def test_different_stripe_units_follow_where_the_bytes_are() -> None:
    legs = compute_legs(layout(2, unit=MiB), layout(2, unit=2 * MiB))
    assert pairs(legs) == {(0, 0), (1, 0), (0, 1), (1, 1)}
    assert sum(leg.bytes for leg in legs) == 128 * MiB


@pytest.mark.parametrize(("ns", "nd"), [(1, 1), (2, 3), (5, 7), (8, 4), (6, 9)])
def test_legs_cover_the_source_exactly_once(ns: int, nd: int) -> None:
    source, dest = layout(ns, size=63 * MiB), layout(nd, size=64 * MiB * 8)
    legs = compute_legs(source, dest)
    assert sum(leg.bytes for leg in legs) == source.capacity
    assert len(pairs(legs)) == len(legs)


def test_a_short_source_ends_inside_the_first_period() -> None:
    legs = compute_legs(layout(1, size=MiB), layout(4))
    assert legs == [Leg(0, 0, MiB)]


def test_stripe_units_without_a_workable_period_are_refused() -> None:
    source = StripeLayout([1 << 44] * 7, 4096 * 10007)
    dest = StripeLayout([1 << 44] * 11, 4096 * 10009)
    with pytest.raises(LayoutError, match="common period"):
        compute_legs(source, dest)


def test_extents_deal_every_stream_at_least_sixteen() -> None:
    gib = 1 << 30
    assert extent_size(8 * MiB, 4 * gib, 16) == 8 * MiB  # the stripe unit fits
    assert extent_size(8 * MiB, 4 * gib, 48) == 4 * MiB  # 85 MiB a stream: 4 MiB extents
    assert extent_size(8 * MiB, gib, 32) == 2 * MiB
    assert extent_size(8 * MiB, 64 * MiB, 32) == MiB  # never under 1 MiB
    assert extent_size(512 * MiB, 64 * gib, 1) == 64 * MiB  # never over 64 MiB
    assert extent_size(3 * MiB, 64 * gib, 4) == 3 * MiB  # inside the stripe unit
