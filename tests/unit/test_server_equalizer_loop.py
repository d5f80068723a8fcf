"""The equalizer loop on a migrated SQLite database: collected samples in, caps pushed
to the copy's agent (a recording client), decisions recorded as events."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from test_server_telemetry import make_transfer, rec, store

from reservoir.common.placement import placement
from reservoir.server.app.agent_client import AgentRef, Json
from reservoir.server.app.tables import Transfer, TransferEvent
from reservoir.server.domain.equalizer_loop import EqualizerLoop, stream_groups


class RecordingAgents:
    def __init__(self) -> None:
        self.pushed: list[tuple[str, Json]] = []

    async def set_caps(self, agent: AgentRef, copy_id: str, body: Json) -> Json:
        self.pushed.append((copy_id, body))
        return {"applied": True}

    async def aclose(self) -> None:
        return None


def unequal(time: float) -> list[Json]:
    """Two streams on one path, one running nine times faster than the other."""
    return [
        rec(time, "0", bps=90e6, rtt=100_000, path="l1"),
        rec(time, "1", bps=10e6, rtt=100_000, path="l1"),
    ]


def running_transfer(
    sessions: sessionmaker[Session], equalizer: bool, multilink: str = "paths"
) -> str:
    with sessions() as session:
        tid = make_transfer(session)
        transfer = session.get(Transfer, tid)
        assert transfer is not None
        transfer.equalizer = equalizer
        transfer.multilink = multilink
        session.commit()
    return tid


def events_of(sessions: sessionmaker[Session], tid: str) -> list[str]:
    with sessions() as session:
        rows = session.scalars(
            select(TransferEvent).where(
                TransferEvent.transfer_id == tid, TransferEvent.kind == "equalizer"
            )
        ).all()
        return [row.detail for row in rows]


def run_passes(
    sessions: sessionmaker[Session], tid: str, passes: int
) -> tuple[RecordingAgents, int]:
    agents = RecordingAgents()
    loop = EqualizerLoop(sessions, agents)

    async def main() -> int:
        made = 0
        for step in range(passes):
            with sessions() as session:
                store(session, tid, unequal(1000.0 + step))
            made += await loop.tick()
        return made

    return agents, asyncio.run(main())


def test_unequal_streams_get_a_cap_pushed_and_recorded(sessions: sessionmaker[Session]) -> None:
    tid = running_transfer(sessions, equalizer=True)
    agents, made = run_passes(sessions, tid, 6)
    assert made >= 1
    copy_id, body = agents.pushed[0]
    assert copy_id == f"{tid}-leg0" and set(body["stream_cwnd_caps"]) == {"0"}
    assert body["stream_cwnd_caps"]["0"] >= 10
    details = events_of(sessions, tid)
    assert details and details[0].startswith(f"stream {tid}-leg0/0: cap ")
    assert "Jain" in details[0] and "fair share" in details[0]


def test_transfers_without_the_equalizer_are_left_alone(sessions: sessionmaker[Session]) -> None:
    tid = running_transfer(sessions, equalizer=False)
    agents, made = run_passes(sessions, tid, 6)
    assert made == 0 and agents.pushed == [] and events_of(sessions, tid) == []


def test_mptcp_transfers_are_left_alone(sessions: sessionmaker[Session]) -> None:
    # their streams span every link, and MPTCP sockets take neither clamp nor pacing rate
    tid = running_transfer(sessions, equalizer=True, multilink="mptcp")
    agents, made = run_passes(sessions, tid, 6)
    assert made == 0 and agents.pushed == [] and events_of(sessions, tid) == []


def test_samples_already_seen_are_not_fed_again(sessions: sessionmaker[Session]) -> None:
    tid = running_transfer(sessions, equalizer=True)
    agents = RecordingAgents()
    loop = EqualizerLoop(sessions, agents)

    async def main() -> list[int]:
        made = []
        for step in range(6):  # past the equalizer's ramp window: caps are set
            with sessions() as session:
                store(session, tid, unequal(1000.0 + step))
            made.append(await loop.tick())
        return [sum(made), await loop.tick()]

    first, second = asyncio.run(main())
    assert first >= 1 and second == 0


@dataclass(frozen=True)
class FakeLink:
    name: str
    capacity_bps: int
    bottleneck: str | None = None


def test_streams_are_grouped_by_the_link_the_coordinator_placed_them_on() -> None:
    """Over links of unequal capacity the coordinator deals a copy's streams in
    proportion (sc2003-scaled: 585/293/122 Mbit/s, 24 streams: 14/7/3), not i mod k;
    a stream grouped by i mod k would be counted in another bottleneck's aggregate."""
    links = [FakeLink("l1", 585_000_000), FakeLink("l2", 293_000_000), FakeLink("l3", 122_000_000)]
    groups = stream_groups(links, 24)
    on = placement([lk.capacity_bps for lk in links], 24)  # what the copy's paths say
    assert groups == tuple(f"link l{i + 1}" for i in on)
    assert [groups.count(f"link {n}") for n in ("l1", "l2", "l3")] == [14, 7, 3]
    equal = [FakeLink("a", 500_000_000, "b1"), FakeLink("b", 500_000_000)]
    assert stream_groups(equal, 4) == ("bottleneck b1", "link b", "bottleneck b1", "link b")
