"""``/metrics``: the agent's state in Prometheus' text format.

Each app has a :class:`~prometheus_client.CollectorRegistry` of its own
(:func:`registry`) whose :class:`AgentCollector` reads the agent at every scrape: its
copies, their telemetry files, its NIC pacing, its builtin target and storage engines
(no background task; no process-wide metric state, so several agents in one process
export their own). Names follow Prometheus' conventions: base units (bytes, seconds),
``_total`` only on counters, and a bounded set of series: a copy has series of its own
while it is queued or running and for :data:`RECENT_SECONDS` after it last changed
state; the count of copies by state covers the rest. The target's and storage's
series exist when the target runs inside the agent (``target_config``).

- ``reservoir_build_info{version}``, ``reservoir_agent_info{agent}``: 1, with the
  version and the agent's name;
- ``reservoir_copies{state}``: the copies the agent keeps in each state, all of them;
- per copy (label ``copy``): ``reservoir_copy_state{state}`` (1 for its current
  state, 0 for the others), ``reservoir_copy_size_bytes`` (once known),
  ``reservoir_copy_copied_bytes_total``, ``reservoir_copy_sent_bytes_total`` (what
  its current run wrote, resent bytes included), ``reservoir_copy_streams``,
  ``reservoir_copy_streams_up``, ``reservoir_copy_paths``, ``reservoir_copy_paths_up``;
- per stream (labels ``copy, stream, path``), counters from its TCP_INFO samples:
  ``reservoir_copy_stream_sent_bytes_total`` (bytes the peer acknowledged),
  ``reservoir_copy_stream_retransmits_total`` (segments sent again),
  ``reservoir_copy_stream_busy_seconds_total`` (data in flight or queued),
  ``reservoir_copy_stream_rwnd_limited_seconds_total`` and
  ``reservoir_copy_stream_sndbuf_limited_seconds_total`` (held back by the peer's
  receive window, by the send buffer); and while the copy runs, from its latest
  sample (a stream that ended has none): ``reservoir_copy_stream_cwnd_bytes``,
  ``reservoir_copy_stream_in_flight_bytes``, ``reservoir_copy_stream_rtt_seconds``;
- ``reservoir_copy_path_state{copy,path,state}``: a running copy's path health (with
  two paths or more), one series per state;
- per path, over every copy since the agent started: ``reservoir_path_sent_bytes_total``,
  ``reservoir_path_retransmits_total``;
- NIC pacing: ``reservoir_nic_pacing_enabled`` (1 if the agent paces NICs),
  ``reservoir_nic_paced{nic}`` (1: its qdisc paces it; 0: a copy asks for it and it
  could not be paced), ``reservoir_nic_paced_rate_bytes_per_second{nic,qdisc}``;
- the builtin target (label ``target``): ``reservoir_target_sessions``,
  ``reservoir_target_connections``, ``reservoir_target_commands_total{kind}``
  (``read``, ``write``, ``other``), ``reservoir_target_read_bytes_total`` (data its
  reads sent), ``reservoir_target_written_bytes_total`` (data of its writes that ended
  GOOD);
- storage (label ``engine``: ``target`` for the target's LUNs, ``copies`` for the
  copies' local volumes): ``reservoir_storage_engine_info{backend}`` (1),
  ``reservoir_storage_requests_total{op}`` (completed),
  ``reservoir_storage_page_cache_reads_total`` (answered at once from the page cache),
  ``reservoir_storage_read_bytes_total``, ``reservoir_storage_written_bytes_total``
  (data the kernel sends straight from a file, with sendfile, is not counted),
  ``reservoir_storage_direct_written_bytes_total`` (of those, written past the page
  cache with O_DIRECT: a LUN's bulk writes);
- memory held for data, ``reservoir_buffer_bytes{buffers}``: ``target_arena`` (the
  target's receive arena, registered with io_uring), ``target_arena_lent`` (its part
  holding data received and not yet written), ``target_kept`` and ``target_lent``
  (plain receive buffers kept for reuse, and holding data), ``read_back`` (the
  buffers of the threads that read storage back to hash it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from reservoir import __version__
from reservoir.agent import storage
from reservoir.agent.control.agent import Agent
from reservoir.agent.control.copies import CopyJob
from reservoir.agent.control.models import CopyState
from reservoir.agent.control.nic_pacing import NicPacer
from reservoir.agent.control.stream_totals import CopyTotals, TelemetryTotals
from reservoir.agent.paths import PathState
from reservoir.agent.target.server import TargetServer

__all__ = ["CONTENT_TYPE", "RECENT_SECONDS", "STALE_SECONDS", "AgentCollector", "registry"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
RECENT_SECONDS = 3600.0  # a copy's series stay this long after its last change of state
STALE_SECONDS = 2.0  # a stream's gauges: its sample at most this older than the copy's newest
ACTIVE = frozenset({CopyState.QUEUED, CopyState.RUNNING})
STREAM_LABELS = ["copy", "stream", "path"]

EngineOf = Callable[[], storage.Engine | None]


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels or [])


def _counter(name: str, doc: str, labels: list[str] | None = None) -> CounterMetricFamily:
    """A counter family; ``name`` without ``_total``, which the exposition adds."""
    return CounterMetricFamily(name, doc, labels=labels or [])


def shown(jobs: Iterable[CopyJob], now: float) -> list[CopyJob]:
    """The copies with series of their own: queued or running, or whose state last
    changed less than RECENT_SECONDS ago."""
    return [j for j in jobs if j.state in ACTIVE or now - j.updated < RECENT_SECONDS]


def _identity(agent: Agent) -> Iterator[Metric]:
    build = _gauge("reservoir_build_info", "the agent's version", ["version"])
    build.add_metric([__version__], 1)
    name = _gauge("reservoir_agent_info", "the agent's name", ["agent"])
    name.add_metric([agent.settings.name], 1)
    yield from (build, name)


def _copy_counts(jobs: Iterable[CopyJob]) -> Metric:
    counts = _gauge("reservoir_copies", "copies the agent keeps, in each state", ["state"])
    states = [j.state for j in jobs]
    for each in CopyState:
        counts.add_metric([each.value], states.count(each))
    return counts


def _copy_families(jobs: Iterable[CopyJob]) -> list[Metric]:
    state = _gauge("reservoir_copy_state", "1 for the copy's current state", ["copy", "state"])
    size = _gauge("reservoir_copy_size_bytes", "a copy's size", ["copy"])
    copied = _counter("reservoir_copy_copied_bytes", "bytes a copy has copied", ["copy"])
    sent = _counter(
        "reservoir_copy_sent_bytes",
        "bytes a copy's current run wrote, resent ones included",
        ["copy"],
    )
    parts = {
        name: _gauge(f"reservoir_copy_{name}", doc, ["copy"])
        for name, doc in (
            ("streams", "a copy's streams"),
            ("streams_up", "a copy's streams that work"),
            ("paths", "a copy's paths"),
            ("paths_up", "a copy's paths with a stream that works"),
        )
    }
    for job in jobs:
        p = job.progress
        for each in CopyState:
            state.add_metric([job.id, each.value], 1 if job.state == each else 0)
        if p.total_bytes:
            size.add_metric([job.id], p.total_bytes)
        copied.add_metric([job.id], p.done_bytes)
        sent.add_metric([job.id], p.sent_bytes)
        for name, family in parts.items():
            family.add_metric([job.id], getattr(p, name))
    return [state, size, copied, sent, *parts.values()]


def _stream_counters(totals: dict[str, CopyTotals]) -> list[Metric]:
    sent = _counter(
        "reservoir_copy_stream_sent_bytes",
        "bytes a stream sent that its peer acknowledged (TCP_INFO bytes_acked)",
        STREAM_LABELS,
    )
    retransmits = _counter(
        "reservoir_copy_stream_retransmits", "segments a stream sent again", STREAM_LABELS
    )
    busy = _counter(
        "reservoir_copy_stream_busy_seconds",
        "time a stream had data in flight or queued",
        STREAM_LABELS,
    )
    rwnd = _counter(
        "reservoir_copy_stream_rwnd_limited_seconds",
        "time a stream was held back by its peer's receive window",
        STREAM_LABELS,
    )
    sndbuf = _counter(
        "reservoir_copy_stream_sndbuf_limited_seconds",
        "time a stream was held back by its send buffer",
        STREAM_LABELS,
    )
    for copy_id, copy in totals.items():
        for (stream, path), s in copy.streams.items():
            labels = [copy_id, stream, path]
            sent.add_metric(labels, s.sent_bytes)
            retransmits.add_metric(labels, s.retransmits)
            busy.add_metric(labels, s.busy_us / 1e6)
            rwnd.add_metric(labels, s.rwnd_limited_us / 1e6)
            sndbuf.add_metric(labels, s.sndbuf_limited_us / 1e6)
    return [sent, retransmits, busy, rwnd, sndbuf]


def _stream_gauges(totals: dict[str, CopyTotals]) -> list[Metric]:
    """The state of the streams in their latest samples, for the running copies given."""
    cwnd = _gauge("reservoir_copy_stream_cwnd_bytes", "a stream's congestion window", STREAM_LABELS)
    flight = _gauge(
        "reservoir_copy_stream_in_flight_bytes",
        "bytes a stream sent that are not yet acknowledged",
        STREAM_LABELS,
    )
    rtt = _gauge("reservoir_copy_stream_rtt_seconds", "a stream's smoothed RTT", STREAM_LABELS)
    for copy_id, copy in totals.items():
        newest = copy.newest()
        for (stream, path), s in copy.streams.items():
            if s.time < newest - STALE_SECONDS:
                continue
            labels = [copy_id, stream, path]
            if s.cwnd_bytes is not None:
                cwnd.add_metric(labels, s.cwnd_bytes)
            if s.in_flight_bytes is not None:
                flight.add_metric(labels, s.in_flight_bytes)
            if s.rtt_us is not None:
                rtt.add_metric(labels, s.rtt_us / 1e6)
    return [cwnd, flight, rtt]


def _path_families(totals: dict[str, CopyTotals], everything: TelemetryTotals) -> list[Metric]:
    """Path health of the running copies given; bytes and retransmits per path over
    every copy read."""
    state = _gauge(
        "reservoir_copy_path_state",
        "1 for the health state of a copy's path, 0 for the others",
        ["copy", "path", "state"],
    )
    for copy_id, copy in totals.items():
        for path, now in copy.path_states.items():
            for each in PathState:
                state.add_metric([copy_id, path, each.value], 1 if now == each.value else 0)
    sent = _counter(
        "reservoir_path_sent_bytes", "bytes the streams of a path sent, acknowledged", ["path"]
    )
    retransmits = _counter(
        "reservoir_path_retransmits", "segments the streams of a path sent again", ["path"]
    )
    for path, p in everything.paths.items():
        sent.add_metric([path], p.sent_bytes)
        retransmits.add_metric([path], p.retransmits)
    return [state, sent, retransmits]


def _nic_families(pacer: NicPacer | None) -> list[Metric]:
    enabled = _gauge("reservoir_nic_pacing_enabled", "1 if the agent paces NICs for its copies")
    enabled.add_metric([], 0 if pacer is None else 1)
    paced = _gauge(
        "reservoir_nic_paced",
        "1 if a NIC's qdisc paces it, 0 if a copy asks for it and it is not paced",
        ["nic"],
    )
    rate = _gauge(
        "reservoir_nic_paced_rate_bytes_per_second",
        "the rate a NIC's qdisc paces it at",
        ["nic", "qdisc"],
    )
    if pacer is not None:
        applied, errors = dict(pacer.applied), dict(pacer.errors)  # the pacer's thread writes
        for nic in sorted(set(applied) | set(errors)):
            paced.add_metric([nic], 1 if nic in applied and nic not in errors else 0)
        for nic, a in sorted(applied.items()):
            rate.add_metric([nic, a.kind], a.rate_bps / 8)
    return [enabled, paced, rate]


def _target_families(target: TargetServer | None) -> list[Metric]:
    sessions = _gauge("reservoir_target_sessions", "sessions logged in to a target", ["target"])
    connections = _gauge(
        "reservoir_target_connections", "connections of a target's sessions", ["target"]
    )
    commands = _counter(
        "reservoir_target_commands", "SCSI commands a target received", ["target", "kind"]
    )
    read = _counter("reservoir_target_read_bytes", "data a target's reads sent", ["target"])
    written = _counter(
        "reservoir_target_written_bytes", "data of a target's writes that ended GOOD", ["target"]
    )
    if target is not None:
        live = [s for s in list(target.sessions.values()) if s.target_name is not None]
        for iqn, counts in sorted(target.counts.items()):
            mine = [s for s in live if s.target_name == iqn]
            sessions.add_metric([iqn], len(mine))
            connections.add_metric([iqn], sum(len(s.connections) for s in mine))
            for kind, count in counts.by_kind().items():
                commands.add_metric([iqn, kind], count)
            read.add_metric([iqn], counts.read_bytes)
            written.add_metric([iqn], counts.written_bytes)
    return [sessions, connections, commands, read, written]


def _storage_families(engines: dict[str, storage.Engine]) -> list[Metric]:
    info = _gauge(
        "reservoir_storage_engine_info", "a storage engine and its backend", ["engine", "backend"]
    )
    requests = _counter(
        "reservoir_storage_requests", "storage requests completed", ["engine", "op"]
    )
    cached = _counter(
        "reservoir_storage_page_cache_reads",
        "reads answered at once from the page cache",
        ["engine"],
    )
    read = _counter("reservoir_storage_read_bytes", "bytes read from storage", ["engine"])
    written = _counter("reservoir_storage_written_bytes", "bytes written to storage", ["engine"])
    direct = _counter(
        "reservoir_storage_direct_written_bytes",
        "bytes written to storage past the page cache (O_DIRECT)",
        ["engine"],
    )
    for name, engine in engines.items():
        counts = engine.counts
        info.add_metric([name, engine.kind], 1)
        for op, count in counts.requests().items():
            requests.add_metric([name, op], count)
        cached.add_metric([name], counts.cached_reads)
        read.add_metric([name], counts.read_bytes)
        written.add_metric([name], counts.written_bytes)
        direct.add_metric([name], counts.direct_written_bytes)
    return [info, requests, cached, read, written, direct]


def _buffer_families(target: TargetServer | None) -> list[Metric]:
    held = _gauge("reservoir_buffer_bytes", "memory held for data, by use", ["buffers"])
    if target is not None:
        pool = target.buffers
        held.add_metric(["target_arena"], pool.arena_bytes)
        held.add_metric(["target_arena_lent"], pool.arena_lent)
        held.add_metric(["target_kept"], pool.held)
        held.add_metric(["target_lent"], pool.lent)
    held.add_metric(["read_back"], storage.read_back_buffer_bytes())
    return [held]


class AgentCollector(Collector):
    """Reads ``agent`` at each scrape; keeps the totals of its copies' telemetry
    between scrapes (:class:`TelemetryTotals`). ``copies_engine``: the storage engine
    of the copies' local volumes (the event loop's default one, once opened)."""

    def __init__(
        self, agent: Agent, copies_engine: EngineOf = storage.opened_default_engine
    ) -> None:
        self.agent = agent
        self.copies_engine = copies_engine
        self.telemetry = TelemetryTotals()
        self._read: tuple[frozenset[str], dict[str, CopyTotals]] | None = None
        self._reading = asyncio.Lock()

    def _files(self, visible: Iterable[CopyJob]) -> dict[str, tuple[Path, int]]:
        manager = self.agent.manager
        return {
            j.id: (manager.telemetry_path(j.id), j.telemetry_from)
            for j in visible
            if j.telemetry_from is not None
        }

    async def read_telemetry(self) -> None:
        """Reads what the copies' telemetry files gained since the last scrape, in a
        thread: a run's first read may be long, and the event loop carries the copies.
        The next :meth:`collect` uses it (called alone, it reads by itself)."""
        async with self._reading:
            files = self._files(shown(self.agent.manager.all(), time.time()))
            totals = await asyncio.to_thread(self.telemetry.update, files)
            self._read = (frozenset(files), totals)

    def collect(self) -> Iterator[Metric]:
        manager = self.agent.manager
        jobs = manager.all()
        visible = shown(jobs, time.time())
        files = self._files(visible)
        read, self._read = self._read, None
        totals = read[1] if read is not None and read[0] == frozenset(files) else None
        if totals is None:
            totals = self.telemetry.update(files)
        running = {
            copy_id: t
            for copy_id, t in totals.items()
            if manager.jobs[copy_id].state == CopyState.RUNNING
        }
        yield from _identity(self.agent)
        yield _copy_counts(jobs)
        yield from _copy_families(visible)
        yield from _stream_counters(totals)
        yield from _stream_gauges(running)
        yield from _path_families(running, self.telemetry)
        yield from _nic_families(manager.pacer)
        yield from _target_families(self.agent.target)
        yield from _storage_families(self._engines())
        yield from _buffer_families(self.agent.target)

    def _engines(self) -> dict[str, storage.Engine]:
        """The storage engines the agent uses now, by role."""
        engines: dict[str, storage.Engine] = {}
        target = self.agent.target
        if target is not None and target.engine is not None and not target.engine.closed:
            engines["target"] = target.engine
        copies = self.copies_engine()
        if copies is not None and copies is not engines.get("target"):
            engines["copies"] = copies
        return engines


def registry(agent: Agent) -> tuple[CollectorRegistry, AgentCollector]:
    """A registry of the app's own, with the agent's collector in it; and that collector
    (``read_telemetry`` before each scrape)."""
    out = CollectorRegistry(auto_describe=False)
    collector = AgentCollector(agent)
    out.register(collector)
    return out, collector
