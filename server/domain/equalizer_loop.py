"""The equalizer at work: the control law of ``equalizer.py`` run over every running
transfer whose ``equalizer`` is on, every ``interval`` (0.5 s: the telemetry's pace).
An MPTCP transfer is left alone: its streams span every link (no per-link groups),
and the kernel accepts neither a cwnd clamp nor a pacing rate on an MPTCP socket.

One pass: read each transfer's newest sample per stream (collected by
``telemetry.py``) that is newer than what the last pass saw; feed them to that
transfer's :class:`~reservoir.server.domain.equalizer.Equalizer` (a stream is named
``<copy id>/<stream>``; streams on the same path of the same copy share a
bottleneck group); push the caps of every copy whose caps changed to its agent
(``PUT /copies/{id}/caps``, ``stream_cwnd_caps`` in segments, together with the
pacing rates of the transfer's pacing plan, ``pacing.py``, since a PUT replaces the
copy's whole cap set); record every decision as an ``equalizer`` event with the
figures that led to it.  No database session is held while an agent is called.

Streams share a bottleneck group when they run over links with the same
``bottleneck`` name (links declared as crossing one router queue or WAN circuit),
across the copies and agents of the transfer; a link without one is its own group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from reservoir.common.placement import placement
from reservoir.server.app import events
from reservoir.server.app.agent_client import AgentError, AgentRef, Json
from reservoir.server.app.tables import Link, Transfer, TransferLeg
from reservoir.server.app.tables import StreamSample as SampleRow
from reservoir.server.domain.equalizer import Decision, Equalizer, EqualizerConfig, StreamSample
from reservoir.server.domain.leg_copies import VolumeError, agent_ref, plan_transfer
from reservoir.server.domain.telemetry import latest_per_stream

log = logging.getLogger("reservoir.server.domain.equalizer")

MSS = 1448  # samples carry the path MTU; 1500 - 52


class CapsClient(Protocol):
    async def set_caps(self, agent: AgentRef, copy_id: str, body: Json) -> Json: ...

    async def aclose(self) -> None: ...


@dataclass
class _Copy:
    agent: AgentRef
    base: Json = field(default_factory=dict)  # the pacing plan's caps of the copy
    pushed: dict[int, int] = field(default_factory=dict)  # stream -> segments


@dataclass
class _State:
    equalizer: Equalizer
    seen: float = 0.0  # newest sample time fed so far
    copies: dict[str, _Copy] = field(default_factory=dict)


@dataclass
class _Work:
    transfer_id: str
    samples: list[StreamSample]
    newest: float
    agents: dict[str, AgentRef]
    base: dict[str, Json]  # copy -> the pacing plan's caps


class EqualizerLoop:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        client: CapsClient,
        *,
        interval: float = 0.5,
        config: EqualizerConfig | None = None,
    ) -> None:
        self.sessions = sessions
        self.client = client
        self.interval = interval
        self.config = config or EqualizerConfig()
        self._states: dict[str, _State] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.client.aclose()

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # one bad pass must not stop the loop
                log.exception("equalizer pass failed")
            await asyncio.sleep(self.interval)

    async def tick(self) -> int:
        """One pass; returns the number of decisions made."""
        with self.sessions() as session:
            work = self._snapshot(session)
        made: dict[str, list[Decision]] = {}
        for item in work:
            state = self._states.setdefault(item.transfer_id, _State(Equalizer(self.config)))
            state.seen = item.newest
            for copy_id, agent in item.agents.items():
                state.copies.setdefault(copy_id, _Copy(agent)).base = item.base.get(copy_id, {})
            made[item.transfer_id] = state.equalizer.step(item.samples, time.time())
        for transfer_id, decisions in made.items():
            if decisions:
                await self._push(self._states[transfer_id])
        self._record(made)
        return sum(len(d) for d in made.values())

    def _snapshot(self, session: Session) -> list[_Work]:
        running = session.scalars(
            select(Transfer).where(
                Transfer.state == "running",
                Transfer.equalizer.is_(True),
                Transfer.multilink != "mptcp",
            )
        ).all()
        for gone in set(self._states) - {t.id for t in running}:
            del self._states[gone]
        work = []
        for transfer in running:
            seen = self._states[transfer.id].seen if transfer.id in self._states else 0.0
            fresh = [s for s in latest_per_stream(session, [transfer.id]) if s.time > seen]
            if not fresh:
                continue
            layout = _layout(session, transfer)
            samples = [x for s in fresh if (x := _sample(s, layout)) is not None]
            newest = max(s.time for s in fresh)
            work.append(_Work(transfer.id, samples, newest, _agents(transfer), layout.base))
        return work

    async def _push(self, state: _State) -> None:
        """Sends each copy whose caps changed its whole set of cwnd caps."""
        for copy_id, copy in state.copies.items():
            prefix = f"{copy_id}/"
            caps = {
                int(name[len(prefix) :]): segments
                for name, segments in state.equalizer.caps.items()
                if name.startswith(prefix)
            }
            if caps == copy.pushed:
                continue
            body: Json = {**copy.base, "stream_cwnd_caps": {str(s): c for s, c in caps.items()}}
            try:
                await self.client.set_caps(copy.agent, copy_id, body)
            except AgentError as exc:
                log.warning("caps for copy %s not set: %s", copy_id, exc)
                continue
            copy.pushed = caps

    def _record(self, made: dict[str, list[Decision]]) -> None:
        if not any(made.values()):
            return
        with self.sessions() as session:
            for transfer_id, decisions in made.items():
                transfer = session.get(Transfer, transfer_id)
                if transfer is None:
                    continue
                for d in decisions:
                    events.record(session, transfer, "equalizer", _describe(d))
            session.commit()


@dataclass(frozen=True)
class _Layout:
    """What a transfer's plan says of its copies."""

    base: dict[str, Json]  # copy -> the pacing plan's caps
    groups: dict[str, tuple[str, ...]]  # copy -> the bottleneck group of each path


def _layout(session: Session, transfer: Transfer) -> _Layout:
    try:
        plans = plan_transfer(session, transfer)
    except VolumeError:  # the scheduler reports it; nothing to pace or group by
        return _Layout({}, {})
    base = {p.copy_id: dict(p.request.get("caps") or {}) for p in plans}
    groups = {}
    for plan in plans:
        links = [lk for i in plan.link_ids if (lk := session.get(Link, i)) is not None]
        streams = int(plan.request.get("streams") or len(links))
        groups[plan.copy_id] = stream_groups(links, streams)
    return _Layout(base, groups)


class LinkLike(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def bottleneck(self) -> str | None: ...

    @property
    def capacity_bps(self) -> int: ...


def stream_groups(links: Sequence[LinkLike], streams: int) -> tuple[str, ...]:
    """The group of each of a copy's ``streams`` streams over ``links`` (in its paths'
    order): the bottleneck of the link it runs on. That is where the coordinator placed
    it (leg_copies: over links of unequal capacity, streams in proportion to it, the
    copy's paths given one a stream; otherwise stream i on link i mod k)."""
    names = [f"bottleneck {lk.bottleneck}" if lk.bottleneck else f"link {lk.name}" for lk in links]
    return tuple(names[i] for i in placement([lk.capacity_bps for lk in links], streams))


def _group(row: SampleRow, layout: _Layout) -> str:
    """A stream's group: the bottleneck of the link it runs on (:func:`stream_groups`),
    shared with every stream of the transfer behind it."""
    groups = layout.groups.get(row.copy_id, ())
    if groups and row.stream.isdigit():
        return groups[int(row.stream) % len(groups)]
    return f"{row.copy_id} {row.path}" if row.path else row.copy_id


def _sample(row: SampleRow, layout: _Layout) -> StreamSample | None:
    """The control law's view of a collected sample (None without a rate or an RTT)."""
    if row.bits_per_second is None or not row.rtt:
        return None
    group = _group(row, layout)
    name = f"{row.copy_id}/{row.stream}"
    return StreamSample(name, group, row.bits_per_second / 8, row.rtt / 1e6, MSS)


def _agents(transfer: Transfer) -> dict[str, AgentRef]:
    agents: dict[str, AgentRef] = {}
    for leg in transfer.legs:
        if isinstance(leg, TransferLeg) and leg.copy_id is not None:
            agents.setdefault(leg.copy_id, agent_ref(leg.source_volume.agent))
    return agents


def _describe(d: Decision) -> str:
    cap = "lifted" if d.new is None else f"{d.new} segments"
    was = "" if d.old is None else f" (was {d.old})"
    return (
        f"stream {d.stream}: cap {cap}{was}; fair share {d.fair_share * 8 / 1e6:.1f} Mbit/s, "
        f"Jain {d.jain:.3f}, aggregate {d.aggregate * 8 / 1e6:.1f} Mbit/s, "
        f"multiplier {d.multiplier:.2f}: {d.reason}"
    )
