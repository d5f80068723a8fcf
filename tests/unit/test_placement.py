"""Streams dealt to links in proportion to their capacities (reservoir/common/placement.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from reservoir.common.placement import placement


def test_sc2003_paths_get_streams_in_proportion_to_capacity() -> None:
    on = placement([585e6, 293e6, 122e6], 24)
    assert Counter(on) == {0: 14, 1: 7, 2: 3}
    assert len(set(on[:3])) == 2 and set(on[:4]) == {0, 1, 2}  # every prefix is spread


@pytest.mark.parametrize(
    ("capacities", "streams", "expected"),
    [
        ([500e6, 500e6], 8, [0, 1] * 4),  # equal links: i mod k, as before
        ([585e6, 293e6, 122e6], 3, [0, 1, 2]),  # no more streams than links: one each
        ([585e6, 293e6, 122e6], 2, [0, 1]),
        ([1e9, 1e7], 4, [0, 0, 1, 0]),  # a thin link keeps one stream
        ([], 4, []),
    ],
)
def test_placement_edges(capacities: list[float], streams: int, expected: list[int]) -> None:
    assert placement(capacities, streams) == expected


@pytest.mark.parametrize("streams", [5, 12, 48, 256])
def test_every_link_gets_a_stream_and_the_counts_add_up(streams: int) -> None:
    on = placement([585e6, 293e6, 122e6, 10e6], streams)
    counts = Counter(on)
    assert len(on) == streams and set(counts) == {0, 1, 2, 3}
    assert counts[0] >= counts[1] >= counts[2] >= counts[3] >= 1
