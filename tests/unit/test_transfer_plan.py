"""The transfer plan: extents, round-robin dealing, work stealing, requeue."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reservoir.agent.transfer import Plan, PlanError, Queues, ServerPair, make_plan
from reservoir.common.striping import member_ends


def plan_of(offset: int, length: int, extent: int, block: int = 512, streams: int = 4) -> Plan:
    return make_plan(
        offset, length, extent_size=extent, block_size=block, pair=ServerPair("s", "d", streams)
    )


@given(
    st.integers(0, 1000),
    st.integers(1, 5000),
    st.integers(1, 300_000),
    st.sampled_from([512, 4096]),
    st.integers(1, 9),
)
def test_every_byte_exactly_once_and_aligned(
    start: int, blocks: int, extent: int, block: int, streams: int
) -> None:
    plan = plan_of(start * block, blocks * block, extent, block, streams)
    position = plan.offset
    for i, e in enumerate(plan.extents):
        assert e.id == i and e.offset == position
        assert e.offset % block == 0 and e.length % block == 0 and e.length > 0
        assert e.length == plan.extent_size or i == len(plan.extents) - 1
        position = e.end
    assert position == plan.offset + plan.length
    dealt = sorted(i for lane in plan.assignment() for i in lane)
    assert dealt == list(range(len(plan.extents)))


def test_deterministic() -> None:
    assert plan_of(4096, 100 << 20, 8 << 20) == plan_of(4096, 100 << 20, 8 << 20)
    assert plan_of(0, 1 << 20, 1000).extent_size == 1024  # rounded up to blocks


def test_round_robin() -> None:
    plan = plan_of(0, 10 << 20, 1 << 20)
    assert plan.assignment() == [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]
    assert plan.extent(5).offset == 5 << 20 and plan.extent(5).length == 1 << 20


def test_refuses_unaligned_or_empty() -> None:
    with pytest.raises(PlanError, match="aligned"):
        plan_of(100, 4096, 4096)
    with pytest.raises(PlanError, match="aligned"):
        plan_of(0, 1000, 4096)
    with pytest.raises(PlanError, match="positive"):
        plan_of(0, 0, 4096)


def test_steals_from_the_back_of_the_longest_queue() -> None:
    queues = Queues(plan_of(0, 12 << 20, 1 << 20))
    for _ in range(3):
        assert queues.take(0) is not None
    stolen = queues.take(0)
    assert stolen is not None and stolen.id == 9  # stream 1 has 1, 5, 9: its last one
    assert queues.steals == 1


def test_skip_and_requeue() -> None:
    plan = plan_of(0, 8 << 20, 1 << 20)
    queues = Queues(plan, skip={0, 1, 2})
    assert len(queues) == 5
    first = queues.take(3)
    assert first is not None and first.id == 3
    queues.requeue([plan.extent(6), plan.extent(1)])
    taken = [queues.take(2), queues.take(2)]
    assert [e.id for e in taken if e] == [1, 6]


def simulate(speeds: list[float], extents: int) -> list[float]:
    """Streams of ``speeds`` (extents per second) draining one plan; finish times."""
    queues = Queues(plan_of(0, extents << 20, 1 << 20, streams=len(speeds)))
    events = [(0.0, i) for i in range(len(speeds))]
    finish = [0.0] * len(speeds)
    while events:
        now, stream = heapq.heappop(events)
        if queues.take(stream) is None:
            finish[stream] = now
            continue
        heapq.heappush(events, (now + 1 / speeds[stream], stream))
    return finish


@pytest.mark.parametrize("speeds", [[1, 1, 1, 1], [1, 2, 3, 4], [10, 1, 1, 0.2], [5, 0.5]])
def test_streams_of_different_speeds_finish_together(speeds: list[float]) -> None:
    finish = simulate(speeds, 200)
    assert max(finish) - min(finish) <= 1 / min(speeds) + 1e-9
    without_stealing = max(len(range(i, 200, len(speeds))) / s for i, s in enumerate(speeds))
    assert max(finish) <= without_stealing


def striped(offset: int, length: int, unit: int, members: int, streams: int = 2) -> Plan:
    pairs = tuple(ServerPair("s", f"d{m}", streams) for m in range(members))
    return make_plan(
        offset, length, extent_size=4 << 20, block_size=512, pairs=pairs, stripe_unit=unit
    )


def test_level_one_deals_stripe_units_round_robin_over_destinations() -> None:
    unit = 1 << 20
    plan = striped(0, 6 * unit, unit, 3)
    assert [(e.pair, e.dest_offset, e.length) for e in plan.extents] == [
        (0, 0, unit), (1, 0, unit), (2, 0, unit), (0, unit, unit), (1, unit, unit), (2, unit, unit)
    ]  # fmt: skip


def test_level_one_extents_never_cross_a_stripe_unit_and_cover_the_range() -> None:
    unit = 3 << 20
    plan = striped(512 * 3, (20 << 20) + 1024, unit, 2)
    assert sum(e.length for e in plan.extents) == (20 << 20) + 1024
    assert all(e.offset // unit == (e.end - 1) // unit for e in plan.extents)
    assert all(e.length <= 3 << 20 for e in plan.extents)
    for e in plan.extents:  # logical byte p of stripe s sits on member s % 2
        stripe, within = divmod(e.offset, unit)
        assert (e.pair, e.dest_offset) == (stripe % 2, (stripe // 2) * unit + within)
    assert member_ends(plan.offset, plan.length, unit, 2) == [
        plan.dest_end(0),
        plan.dest_end(1),
    ]


def test_level_two_keeps_each_pair_on_its_own_streams() -> None:
    plan = striped(0, 16 << 20, 1 << 20, 2, streams=3)
    lanes = plan.assignment()
    for stream, lane in enumerate(lanes):
        assert {plan.extent(i).pair for i in lane} == {plan.pair_of(stream)}
    assert [len(lane) for lane in lanes] == [3, 3, 2, 3, 3, 2]


def test_stealing_stays_inside_the_pair() -> None:
    plan = striped(0, 8 << 20, 1 << 20, 2, streams=2)
    queues = Queues(plan)
    taken = []
    while (extent := queues.take(0)) is not None:  # stream 0 of pair 0, alone
        taken.append(extent)
    assert taken and all(e.pair == 0 for e in taken)
    assert len(taken) == sum(1 for e in plan.extents if e.pair == 0)
    assert queues.take(2) is not None  # pair 1's extents are still there


def test_stripe_unit_must_be_block_aligned_with_several_destinations() -> None:
    with pytest.raises(PlanError, match="stripe unit"):
        striped(0, 8 << 20, 1000, 2)
