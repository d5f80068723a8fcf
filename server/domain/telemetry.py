"""Per-stream telemetry of running transfers: collected from the agents, stored,
served (``GET /transfers/{id}/streams``, the ``/live`` feed, ``/metrics``).

Collection (:class:`TelemetryCollector`, a task of the app's lifespan next to the
scheduler): every :data:`COLLECT_INTERVAL` (2 Hz) one pass reads a snapshot of the
agent copies that carry running legs, asks each source agent for the copy's last
:data:`FETCH_LIMIT` telemetry records (``GET /copies/{id}/telemetry?limit=N``) and
the copy itself (its ``caps``), then stores what is new in a new session. No
database session is held while an agent is asked.

The cursor: the agent answers the *last* N records, so each copy has a
:class:`Cursor`, the newest sample time stored and the streams stored at that time;
a record is new if it is later, or as late for another stream. After a coordinator
restart the cursor starts from the newest sample in the database. A gap longer than
N records (``FETCH_LIMIT / streams / 2`` seconds of an agent not answering) loses
the records in between; the history then has a hole, nothing is duplicated. A copy
no longer running (completed, paused...) gets one last fetch, for the records the
engine writes at its end; a copy its agent says has stopped while the database has
it running wakes the scheduler (``on_copy_ended``), which then need not wait for its
own next pass to complete or fail the transfer.

Only ``"stream"`` records are stored (``"path"`` and ``"progress"`` records are not:
progress is the scheduler's). A sample's ``cap`` is the cwnd cap (segments) the
copy reports for that stream (``caps.requested.stream_cwnd_caps``); the NIC pacing
rates the copy reports (``caps.requested.nic_pacing_rates``) are kept per transfer,
agent and NIC in ``nic_pacing_rates``.

Retention: a transfer keeps its whole history, at full rate for the last 15 minutes
and merged into 30 s, then 5-minute rows further back (``telemetry_rollup.py``); at
most :data:`MAX_ROWS_PER_TRANSFER` rows are kept (the newest), a bound only transfers
of days reach. Done every :data:`PRUNE_EVERY` passes for the transfers that got
samples; a transfer's rows go with it when it is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from reservoir.server.app.agent_client import AgentError, AgentRef
from reservoir.server.app.tables import (
    Agent,
    NicPacingRate,
    StreamSample,
    Transfer,
    TransferEvent,
    TransferLeg,
    utcnow,
)
from reservoir.server.domain.leg_copies import agent_ref
from reservoir.server.domain.telemetry_rollup import downsample

__all__ = [
    "COLLECT_INTERVAL",
    "FETCH_LIMIT",
    "MAX_ROWS_PER_TRANSFER",
    "Cursor",
    "LiveCursor",
    "TelemetryCollector",
    "latest_per_stream",
    "list_samples",
    "live_poll",
    "nic_rates",
    "parse_records",
    "prune",
    "sample_dict",
    "stream_caps",
]

log = logging.getLogger("reservoir.server")

Json = dict[str, Any]
COLLECT_INTERVAL = 0.5  # seconds: 2 Hz, the agents' sampling rate
FETCH_LIMIT = 1000  # records asked per copy and pass
MAX_ROWS_PER_TRANSFER = 200_000
PRUNE_EVERY = 20  # passes
COPY_ACTIVE = ("queued", "running")
FINAL = ("completed", "cancelled")


# ---------------------------------------------------------------- parsing


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _span(value: Any) -> float | None:
    """The interval a record stands for (iperf3's ``seconds``), if sane."""
    seconds = _num(value)
    return seconds if seconds is not None and 0 < seconds <= 3600 else None


def _int(value: Any) -> int | None:
    number = _num(value)
    return None if number is None else int(number)


LIMITS = {
    "busy": "busy_us",
    "rwnd_limited": "rwnd_limited_us",
    "sndbuf_limited": "sndbuf_limited_us",
}


def _limits(record: Json) -> dict[str, float | None]:
    """What held the stream back, as shares of the record's interval (0-1): the
    agent's microseconds over its ``seconds``; None when either is missing."""
    seconds = _num(record.get("seconds"))
    out: dict[str, float | None] = dict.fromkeys(LIMITS)
    if seconds is None or seconds <= 0:
        return out
    for name, key in LIMITS.items():
        us = _num(record.get(key))
        if us is not None:
            out[name] = min(max(us / (seconds * 1e6), 0.0), 1.0)
    return out


@dataclass(frozen=True, slots=True)
class Cursor:
    """The newest sample time stored for a copy, and the streams stored at that time."""

    time: float = -math.inf
    streams: frozenset[str] = frozenset()

    def seen(self, time: float, stream: str) -> bool:
        return time < self.time or (time == self.time and stream in self.streams)


def stream_caps(copy: Json | None) -> dict[int, int]:
    """A copy's cwnd caps per stream (segments), from the agent's ``caps``."""
    requested = ((copy or {}).get("caps") or {}).get("requested") or {}
    caps = requested.get("stream_cwnd_caps") or {}
    out: dict[int, int] = {}
    for stream, cap in caps.items():
        with contextlib.suppress(TypeError, ValueError):
            out[int(stream)] = int(cap)
    return out


def nic_rates(copy: Json | None) -> dict[str, int] | None:
    """A copy's NIC pacing rates (bytes/s); ``None`` if the agent said nothing of caps."""
    caps = (copy or {}).get("caps")
    if not isinstance(caps, dict):
        return None
    rates = (caps.get("requested") or {}).get("nic_pacing_rates") or {}
    return {str(nic): int(rate) for nic, rate in rates.items() if _int(rate) is not None}


def parse_records(
    records: Iterable[Json],
    cursor: Cursor,
    *,
    transfer_id: str,
    leg: int,
    copy_id: str,
    caps: Mapping[int, int] | None = None,
) -> tuple[list[StreamSample], Cursor]:
    """The samples of ``records`` not yet stored (per ``cursor``), and the next cursor.

    Records other than ``"stream"`` ones, and ones without a time or a stream, are
    skipped; a record without ``type`` counts as a stream record (the sampler's own
    files)."""
    caps = caps or {}
    samples: list[StreamSample] = []
    seen: set[tuple[float, str]] = set()
    newest, at_newest = cursor.time, set(cursor.streams)
    for record in records:
        if record.get("type", "stream") != "stream":
            continue
        time, stream = _num(record.get("time")), record.get("stream")
        if time is None or stream is None:
            continue
        stream = str(stream)[:32]
        if cursor.seen(time, stream) or (time, stream) in seen:
            continue
        seen.add((time, stream))
        path = record.get("path")
        samples.append(
            StreamSample(
                transfer_id=transfer_id,
                leg=leg,
                copy_id=copy_id,
                stream=stream,
                path=None if path is None else str(path)[:128],
                time=time,
                bits_per_second=_num(record.get("bits_per_second")),
                snd_cwnd=_int(record.get("snd_cwnd")),
                rtt=_int(record.get("rtt")),
                rttvar=_int(record.get("rttvar")),
                retransmits=_int(record.get("retransmits")),
                cap=caps.get(int(stream)) if stream.isdigit() else None,
                span=_span(record.get("seconds")),
                **_limits(record),
            )
        )
        if time > newest:
            newest, at_newest = time, {stream}
        elif time == newest:
            at_newest.add(stream)
    samples.sort(key=lambda s: (s.time, s.stream))
    return samples, Cursor(newest, frozenset(at_newest))


# ---------------------------------------------------------------- storage


def _ended(item: Fetched) -> bool:
    """A copy the database has running that its agent says stopped (completed,
    failed, paused)."""
    return item.watch.active and item.copy is not None and item.copy["state"] not in COPY_ACTIVE


def cursor_from_db(session: Session, copy_id: str) -> Cursor:
    newest = session.scalar(
        select(func.max(StreamSample.time)).where(StreamSample.copy_id == copy_id)
    )
    if newest is None:
        return Cursor()
    streams = session.scalars(
        select(StreamSample.stream).where(
            StreamSample.copy_id == copy_id, StreamSample.time == newest
        )
    ).all()
    return Cursor(newest, frozenset(streams))


def prune(
    session: Session,
    transfer_id: str,
    *,
    keep_seconds: float | None = None,
    keep_rows: int = MAX_ROWS_PER_TRANSFER,
) -> int:
    """Merges the transfer's older samples into coarser ones (``telemetry_rollup.py``),
    then deletes what lies beyond ``keep_seconds`` (default: nothing) and the oldest
    rows beyond ``keep_rows``; how many rows fewer it has."""
    mine = StreamSample.transfer_id == transfer_id
    newest = session.scalar(select(func.max(StreamSample.time)).where(mine))
    if newest is None:
        return 0
    gone = downsample(session, transfer_id)
    if keep_seconds is not None:
        old = delete(StreamSample).where(mine, StreamSample.time < newest - keep_seconds)
        gone += getattr(session.execute(old), "rowcount", 0)
    boundary = session.scalar(
        select(StreamSample.id).where(mine).order_by(StreamSample.id.desc()).offset(keep_rows)
    )
    if boundary is not None:
        beyond = delete(StreamSample).where(mine, StreamSample.id <= boundary)
        gone += getattr(session.execute(beyond), "rowcount", 0)
    return gone


def record_nic_rates(
    session: Session, transfer_id: str, agent_id: str, rates: Mapping[str, int]
) -> None:
    """Makes the stored NIC pacing rates of (transfer, agent) those of ``rates``."""
    rows = session.scalars(
        select(NicPacingRate).where(
            NicPacingRate.transfer_id == transfer_id, NicPacingRate.agent_id == agent_id
        )
    ).all()
    have = {row.nic: row for row in rows}
    for nic, row in have.items():
        if nic not in rates:
            session.delete(row)
    for nic, rate in rates.items():
        current = have.get(nic)
        if current is None:
            session.add(
                NicPacingRate(transfer_id=transfer_id, agent_id=agent_id, nic=nic, rate=rate)
            )
        elif current.rate != rate:
            current.rate, current.updated_at = rate, utcnow()


def nic_pacing(session: Session, transfer_ids: Sequence[str]) -> list[tuple[NicPacingRate, str]]:
    """The NIC pacing rates of ``transfer_ids`` with their agent's name, by transfer,
    agent and NIC (the API's ``/pacing`` and the metrics read them here)."""
    rows = session.execute(
        select(NicPacingRate, Agent.name)
        .join(Agent, Agent.id == NicPacingRate.agent_id)
        .where(NicPacingRate.transfer_id.in_(transfer_ids))
        .order_by(NicPacingRate.transfer_id, Agent.name, NicPacingRate.nic)
    ).all()
    return [(rate, name) for rate, name in rows]


def list_samples(
    session: Session,
    transfer_id: str,
    *,
    since: float | None = None,
    until: float | None = None,
    limit: int = 1000,
) -> list[StreamSample]:
    """The newest ``limit`` samples later than ``since`` and not later than ``until``,
    oldest first."""
    query = select(StreamSample).where(StreamSample.transfer_id == transfer_id)
    if since is not None:
        query = query.where(StreamSample.time > since)
    if until is not None:
        query = query.where(StreamSample.time <= until)
    query = query.order_by(StreamSample.time.desc(), StreamSample.id.desc()).limit(limit)
    return list(reversed(session.scalars(query).all()))


def latest_per_stream(session: Session, transfer_ids: Sequence[str]) -> list[StreamSample]:
    """The newest sample of every (transfer, copy, stream) of ``transfer_ids``."""
    if not transfer_ids:
        return []
    newest = (
        select(func.max(StreamSample.id))
        .where(StreamSample.transfer_id.in_(transfer_ids))
        .group_by(StreamSample.transfer_id, StreamSample.copy_id, StreamSample.stream)
    )
    query = select(StreamSample).where(StreamSample.id.in_(newest))
    return list(session.scalars(query.order_by(StreamSample.id)).all())


def sample_dict(sample: StreamSample) -> Json:
    return {
        "leg": sample.leg,
        "copy_id": sample.copy_id,
        "stream": sample.stream,
        "path": sample.path,
        "time": sample.time,
        "bits_per_second": sample.bits_per_second,
        "snd_cwnd": sample.snd_cwnd,
        "rtt": sample.rtt,
        "rttvar": sample.rttvar,
        "retransmits": sample.retransmits,
        "cap": sample.cap,
        "busy": sample.busy,
        "rwnd_limited": sample.rwnd_limited,
        "sndbuf_limited": sample.sndbuf_limited,
        "span": sample.span,
    }


# ---------------------------------------------------------------- the live feed


@dataclass
class LiveCursor:
    """What a live feed has sent: the last sample and event ids, the last status."""

    sample_id: int = 0
    event_id: int = 0
    status: tuple[Any, ...] | None = None


def newest_sample_id(session: Session, transfer_id: str) -> int:
    newest = session.scalar(
        select(func.max(StreamSample.id)).where(StreamSample.transfer_id == transfer_id)
    )
    return int(newest or 0)


def live_poll(
    session: Session, transfer_id: str, cursor: LiveCursor, *, limit: int = 5000
) -> tuple[list[tuple[str, Any]], bool]:
    """What changed since ``cursor`` (advanced) as ``(event name, data)`` pairs:
    ``transfer`` (state and progress), ``event`` (one per event row), ``samples`` (the
    new samples, oldest first); and whether the transfer is final (or gone)."""
    transfer = session.get(Transfer, transfer_id)
    if transfer is None:
        return [], True
    out: list[tuple[str, Any]] = []
    status = (transfer.state, transfer.done_bytes, transfer.total_bytes, transfer.last_error)
    if status != cursor.status:
        cursor.status = status
        out.append(
            (
                "transfer",
                {
                    "id": transfer.id,
                    "state": transfer.state,
                    "done_bytes": transfer.done_bytes,
                    "total_bytes": transfer.total_bytes,
                    "last_error": transfer.last_error,
                    "updated_at": transfer.updated_at.isoformat(),
                },
            )
        )
    events = session.scalars(
        select(TransferEvent)
        .where(TransferEvent.transfer_id == transfer_id, TransferEvent.id > cursor.event_id)
        .order_by(TransferEvent.id)
    ).all()
    for event in events:
        cursor.event_id = event.id
        out.append(
            (
                "event",
                {
                    "id": event.id,
                    "at": event.at.isoformat(),
                    "kind": event.kind,
                    "from_state": event.from_state,
                    "to_state": event.to_state,
                    "detail": event.detail,
                },
            )
        )
    samples = session.scalars(
        select(StreamSample)
        .where(StreamSample.transfer_id == transfer_id, StreamSample.id > cursor.sample_id)
        .order_by(StreamSample.id)
        .limit(limit)
    ).all()
    if samples:
        cursor.sample_id = samples[-1].id
        out.append(("samples", [sample_dict(s) for s in samples]))
    return out, transfer.state in FINAL


# ---------------------------------------------------------------- collection


class TelemetrySource(Protocol):
    async def get_copy(self, agent: AgentRef, copy_id: str) -> Json | None: ...

    async def get_telemetry(
        self, agent: AgentRef, copy_id: str, limit: int
    ) -> list[Json] | None: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Watch:
    """One agent copy to collect from."""

    transfer_id: str
    leg: int
    copy_id: str
    agent: AgentRef
    active: bool  # else: one last fetch


@dataclass
class Fetched:
    watch: Watch
    records: list[Json] | None = None
    copy: Json | None = None
    errors: list[str] = field(default_factory=list)


class TelemetryCollector:
    """Fetches the running copies' telemetry from their agents at 2 Hz and stores it."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        client: TelemetrySource,
        *,
        interval: float = COLLECT_INTERVAL,
        limit: int = FETCH_LIMIT,
        on_copy_ended: Callable[[], None] | None = None,
    ) -> None:
        self.sessions = sessions
        self.on_copy_ended = on_copy_ended  # the scheduler's wake: it need not poll for it
        self.client = client
        self.interval = interval
        self.limit = limit
        self._cursors: dict[str, Cursor] = {}
        self._passes = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run(), name="reservoir-telemetry")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.client.aclose()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.tick()
            except Exception:  # a pass must never end the loop
                log.exception("telemetry pass failed")
            await asyncio.sleep(max(0.05, self.interval - (loop.time() - started)))

    def _snapshot(self, session: Session) -> list[Watch]:
        legs = session.scalars(
            select(TransferLeg).where(
                TransferLeg.copy_id.is_not(None),
                TransferLeg.copy_state.in_(COPY_ACTIVE)
                | TransferLeg.copy_id.in_(list(self._cursors)),
            )
        ).all()
        copies: dict[str, list[TransferLeg]] = {}
        for leg in legs:
            assert leg.copy_id is not None
            copies.setdefault(leg.copy_id, []).append(leg)
        watches = []
        for copy_id, group in copies.items():
            first = min(group, key=lambda leg: leg.index)
            active = any(leg.copy_state in COPY_ACTIVE for leg in group)
            if copy_id not in self._cursors:
                self._cursors[copy_id] = cursor_from_db(session, copy_id)
            agent = agent_ref(first.source_volume.agent)
            watches.append(Watch(first.transfer_id, first.index, copy_id, agent, active))
        return watches

    async def _fetch(self, watch: Watch) -> Fetched:
        out = Fetched(watch)

        async def records() -> None:
            try:
                out.records = await self.client.get_telemetry(
                    watch.agent, watch.copy_id, self.limit
                )
            except AgentError as exc:
                out.errors.append(str(exc))

        async def copy() -> None:
            try:
                out.copy = await self.client.get_copy(watch.agent, watch.copy_id)
            except AgentError as exc:
                out.errors.append(str(exc))

        await asyncio.gather(records(), copy())
        return out

    async def tick(self) -> int:
        """One pass; how many samples were stored."""
        with self.sessions() as session:
            watches = self._snapshot(session)
        if not watches:
            return 0
        fetched = await asyncio.gather(*(self._fetch(w) for w in watches))
        stored = 0
        cursors: dict[str, Cursor] = {}
        touched: set[str] = set()
        with self.sessions() as session:
            for item in fetched:
                w = item.watch
                if session.get(Transfer, w.transfer_id) is None:
                    continue  # deleted meanwhile
                if item.records is not None:
                    samples, cursors[w.copy_id] = parse_records(
                        item.records,
                        self._cursors.get(w.copy_id, Cursor()),
                        transfer_id=w.transfer_id,
                        leg=w.leg,
                        copy_id=w.copy_id,
                        caps=stream_caps(item.copy),
                    )
                    session.add_all(samples)
                    stored += len(samples)
                    if samples:
                        touched.add(w.transfer_id)
                rates = nic_rates(item.copy)
                if rates is not None:
                    record_nic_rates(session, w.transfer_id, w.agent.id, rates)
            self._passes += 1
            if self._passes % PRUNE_EVERY == 0:
                for transfer_id in touched:
                    prune(session, transfer_id)
            session.commit()
        self._cursors.update(cursors)
        if self.on_copy_ended is not None and any(_ended(item) for item in fetched):
            self.on_copy_ended()
        for item in fetched:
            if not item.watch.active:  # its last fetch is done (answered or not)
                self._cursors.pop(item.watch.copy_id, None)
        return stored
