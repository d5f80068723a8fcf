"""The pacing plan a transfer's copies carry, and the equalizer's groups by bottleneck:
a coordinator in process with its scheduler on a fake agent client, links declared
through the API."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import func, select
from test_server_equalizer_loop import RecordingAgents
from test_server_scheduler import IQN, MiB, World, world
from test_server_telemetry import rec, store

from reservoir.common.placement import placement
from reservoir.server.app.tables import Transfer, TransferEvent
from reservoir.server.domain.equalizer_loop import EqualizerLoop

__all__ = ["world"]  # the fixture, used by name

Json = dict[str, Any]
GBIT = 10**9


def agent(w: World, name: str, nics: list[tuple[str, str]], members: int = 1) -> Json:
    volumes: list[Json] = []
    for i in range(members):
        volumes += [
            {"name": f"f{i}", "path": f"/srv/{name}-{i}.img", "size_bytes": 16 * MiB},
            {"name": f"l{i}", "iqn": IQN.format(name), "lun": i, "size_bytes": 16 * MiB},
        ]
    body = {
        "name": name,
        "control_url": f"http://{name}:8740",
        "nics": [{"name": n, "address": a, "speed_bps": 10 * GBIT} for n, a in nics],
        "volumes": volumes,
    }
    return w.register(body)


def link(w: World, name: str, a: Json, b: Json, *, nic: str, bps: int, **kw: Any) -> str:
    body = {
        "name": name,
        "agent_a": a["id"],
        "nic_a": nic,
        "agent_b": b["id"],
        "nic_b": nic,
        "capacity_bps": bps,
        "rtt_ms": 100,
        **kw,
    }
    return str(w.ok(w.api.post("/links", json=body))["id"])


def two_links(w: World, bottleneck: str | None = None, **transfer: Any) -> Json:
    """Agent a (NICs e1, e2) to agent b over links of 1 and 0.5 Gbit/s; 4 streams."""
    a = agent(w, "a", [("e1", "10.1.0.1"), ("e2", "10.2.0.1")])
    b = agent(w, "b", [("e1", "10.1.0.2"), ("e2", "10.2.0.2")])
    shared = {"bottleneck": bottleneck} if bottleneck else {}
    l1 = link(w, "l1", a, b, nic="e1", bps=GBIT, **shared)
    l2 = link(w, "l2", a, b, nic="e2", bps=GBIT // 2, **shared)
    src = w.vset("src", [(a, "f0")])
    dst = w.vset("dst", [(b, "l0")])
    return w.ok(w.transfer(src, dst, paths=[l1, l2], streams_per_pair=4, **transfer))


def started_copy(w: World) -> Json:
    w.tick()
    (copy,) = w.agents.copies.values()
    return copy


def test_per_nic_pacing_gives_each_nic_its_link_share_less_the_margin(world: World) -> None:
    two_links(world, pacing={"policy": "per-nic", "margin": 0.05})
    caps = started_copy(world)["caps"]
    assert caps == {
        "nic_pacing_rates": {"e1": 0.95 * GBIT // 8, "e2": 0.95 * GBIT // 16},
        "nic_pacing_flows": {"e1": 3, "e2": 1},  # streams dealt by capacity: fq's divisor
    }


def test_per_socket_pacing_splits_the_nic_rate_over_its_streams(world: World) -> None:
    two_links(world, pacing={"policy": "per-socket", "margin": 0.1})
    copy = started_copy(world)
    caps = copy["caps"]
    assert [p.partition("=")[0] for p in copy["paths"]] == ["10.1.0.1"] * 2 + [
        "10.2.0.1",
        "10.1.0.1",
    ]  # one path a stream: the agent runs stream i on paths[i]
    # streams dealt in proportion to capacity (placement.py): 0, 1 and 3 on l1 (e1), 2 on l2
    payload = 1448 / 1514  # the NIC rate counts frames, SO_MAX_PACING_RATE payload
    third_l1, all_l2 = 0.9 * GBIT / 3 / 8 * payload, 0.9 * GBIT / 2 / 8 * payload
    rates = caps["stream_pacing_rates"]
    assert set(rates) == {"0", "1", "2", "3"}
    assert rates["0"] == rates["1"] == rates["3"] == pytest.approx(third_l1, abs=1)
    assert rates["2"] == pytest.approx(all_l2, abs=1)


def test_pacing_off_sends_no_caps(world: World) -> None:
    two_links(world, pacing={"policy": "off"})
    assert "caps" not in started_copy(world)


def test_two_copies_on_one_link_split_its_share(world: World) -> None:
    a = agent(world, "a", [("e1", "10.1.0.1")], members=2)
    b = agent(world, "b", [("e1", "10.1.0.2")], members=2)
    lid = link(world, "l1", a, b, nic="e1", bps=GBIT)
    src = world.vset("src", [(a, "f0"), (a, "f1")])
    dst = world.vset("dst", [(b, "l0"), (b, "l1")])
    world.ok(world.transfer(src, dst, paths=[lid]))
    world.tick()
    rates = [c["caps"]["nic_pacing_rates"] for c in world.agents.copies.values()]
    assert rates == [{"e1": 0.95 * GBIT // 16}] * 2


ON_LINK = placement([GBIT, GBIT // 2], 4)  # where the coordinator puts the 4 streams
ON_L1 = {str(s) for s in range(4) if ON_LINK[s] == 0}


def unequal_by_link(time: float) -> list[Json]:
    """Streams on l1 (three of the four: the links' capacities are 2:1) run three times
    faster than the one on l2."""
    return [
        rec(time, str(s), bps=300e6 if on == 0 else 100e6, rtt=100_000, path=f"l{on + 1}")
        for s, on in enumerate(ON_LINK)
    ]


def equalize(w: World, tid: str, passes: int) -> RecordingAgents:
    agents = RecordingAgents()
    loop = EqualizerLoop(w.sessions, agents)
    with w.sessions() as session:
        transfer = session.get(Transfer, tid)
        assert transfer is not None
        transfer.state = "running"
        session.commit()

    async def main() -> None:
        for step in range(passes):
            with w.sessions() as session:
                store(session, tid, unequal_by_link(1000.0 + step))
            await loop.tick()

    asyncio.run(main())
    return agents


def test_links_sharing_a_bottleneck_are_equalized_together(world: World) -> None:
    t = two_links(world, bottleneck="wan", pacing={"policy": "per-nic"})
    world.tick()
    agents = equalize(world, t["id"], 6)  # past the equalizer's ramp window
    assert agents.pushed, "the fast streams of l1 should have been capped"
    copy_id, body = agents.pushed[0]
    assert copy_id == f"{t['id']}-leg0"
    assert set(body["stream_cwnd_caps"]) == ON_L1 and len(ON_L1) == 3
    # the pacing plan's rates go with the caps: a PUT replaces the whole set
    assert body["nic_pacing_rates"] == {"e1": 0.95 * GBIT // 8, "e2": 0.95 * GBIT // 16}


def test_links_without_a_shared_bottleneck_are_equalized_apart(world: World) -> None:
    t = two_links(world)
    world.tick()
    agents = equalize(world, t["id"], 6)  # past the equalizer's ramp window
    assert agents.pushed == []  # within each link the two streams are equal
    with world.sessions() as session:
        n = session.scalar(
            select(func.count(TransferEvent.id)).where(TransferEvent.kind == "equalizer")
        )
    assert n == 0
