"""``/metrics``: the coordinator's state in Prometheus' text format.

Every scrape builds its own :class:`~prometheus_client.CollectorRegistry` from the
database (no process-wide metric state: several coordinators, restarts and tests
see the same numbers). Names follow Prometheus' conventions: base units (bytes,
seconds), ``_total`` only on counters, and a bounded set of series: the transfers
that are not final (completed, cancelled) and those that became final in the last
:data:`RECENT_SECONDS`; the count of every transfer by state covers the rest.

==================================================  =================================
``reservoir_build_info{version}``                   1
``reservoir_transfers{state}``                      transfers in each state, all of them
``reservoir_transfer_size_bytes{transfer}``         the transfer's size
``reservoir_transfer_copied_bytes_total``           counter: bytes copied so far
``{transfer}``
``reservoir_transfer_state{transfer,state}``        1 for its current state, 0 for the
                                                    others (one series per state)
``reservoir_transfer_throughput_bytes_per_second``  running transfers: the sum of its
``{transfer}``                                      streams' latest throughput samples
``reservoir_stream_throughput_bytes_per_second``    per stream of a transfer that is
``reservoir_stream_cwnd_bytes``                     not final, from its latest sample;
``reservoir_stream_rtt_seconds``                    labels ``transfer, leg, copy,
``reservoir_stream_retransmits_last_interval``      stream, path``; the cap only if one
``reservoir_stream_cwnd_cap_segments``              is set
``reservoir_nic_pacing_rate_bytes_per_second``      per NIC pacing rate the agents
``{transfer,agent,nic}``                            report (omitted when none)
``reservoir_agents{status}``                        agents: registered (no heartbeat
                                                    yet), ok, unreachable
``reservoir_agent_last_heartbeat_timestamp_seconds  when each agent's last heartbeat
{agent}``                                           arrived (Unix seconds)
==================================================  =================================

A stream counts in a transfer's throughput if its latest sample is at most
:data:`STALE_SECONDS` older than the transfer's newest sample (a stream that ended
does not count).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import select
from sqlalchemy.orm import Session

from reservoir import __version__
from reservoir.server.app.models import TransferState
from reservoir.server.app.services.agents import status as agent_status
from reservoir.server.app.tables import Agent, StreamSample, Transfer, utcnow
from reservoir.server.domain.telemetry import FINAL, latest_per_stream, nic_pacing

__all__ = ["CONTENT_TYPE", "RECENT_SECONDS", "STALE_SECONDS", "families", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STALE_SECONDS = 2.0
RECENT_SECONDS = 3600.0  # a final transfer's series stay this long after it ended
STREAM_LABELS = ["transfer", "leg", "copy", "stream", "path"]


class _Fixed(Collector):
    def __init__(self, metrics: Sequence[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return iter(self.metrics)


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _stream_families(samples: Sequence[StreamSample]) -> Iterator[Metric]:
    rate = _gauge(
        "reservoir_stream_throughput_bytes_per_second",
        "a stream's acknowledged throughput in its latest sample",
        STREAM_LABELS,
    )
    cwnd = _gauge("reservoir_stream_cwnd_bytes", "a stream's congestion window", STREAM_LABELS)
    rtt = _gauge("reservoir_stream_rtt_seconds", "a stream's smoothed RTT", STREAM_LABELS)
    retrans = _gauge(
        "reservoir_stream_retransmits_last_interval",
        "segments a stream retransmitted in its latest sampling interval",
        STREAM_LABELS,
    )
    cap = _gauge(
        "reservoir_stream_cwnd_cap_segments",
        "the cwnd cap in force on a stream (the equalizer's)",
        STREAM_LABELS,
    )
    for s in samples:
        labels = [s.transfer_id, str(s.leg), s.copy_id, s.stream, s.path or ""]
        if s.bits_per_second is not None:
            rate.add_metric(labels, s.bits_per_second / 8)
        if s.snd_cwnd is not None:
            cwnd.add_metric(labels, s.snd_cwnd)
        if s.rtt is not None:
            rtt.add_metric(labels, s.rtt / 1e6)
        if s.retransmits is not None:
            retrans.add_metric(labels, s.retransmits)
        if s.cap is not None:
            cap.add_metric(labels, s.cap)
    yield from (rate, cwnd, rtt, retrans)
    if cap.samples:
        yield cap


def _rates(samples: Sequence[StreamSample]) -> dict[str, float]:
    """Bytes per second of each transfer: its streams' latest samples that are recent."""
    newest: dict[str, float] = {}
    for s in samples:
        newest[s.transfer_id] = max(newest.get(s.transfer_id, s.time), s.time)
    rates: dict[str, float] = {}
    for s in samples:
        if s.bits_per_second is not None and s.time >= newest[s.transfer_id] - STALE_SECONDS:
            rates[s.transfer_id] = rates.get(s.transfer_id, 0.0) + s.bits_per_second / 8
    return rates


def _shown(transfers: Sequence[Transfer]) -> list[Transfer]:
    """The transfers with series of their own: not final, or final for less than
    RECENT_SECONDS (by their last update)."""
    now = utcnow()
    return [
        t
        for t in transfers
        if t.state not in FINAL or (now - t.updated_at).total_seconds() < RECENT_SECONDS
    ]


def _transfer_families(transfers: Sequence[Transfer], rates: dict[str, float]) -> list[Metric]:
    size = _gauge("reservoir_transfer_size_bytes", "a transfer's size", ["transfer"])
    copied = CounterMetricFamily(
        "reservoir_transfer_copied_bytes", "bytes a transfer has copied", labels=["transfer"]
    )
    state = _gauge(
        "reservoir_transfer_state", "1 for the transfer's current state", ["transfer", "state"]
    )
    rate = _gauge(
        "reservoir_transfer_throughput_bytes_per_second",
        "a running transfer's throughput: the sum of its streams' latest samples",
        ["transfer"],
    )
    for t in transfers:
        size.add_metric([t.id], t.total_bytes)
        copied.add_metric([t.id], t.done_bytes)
        for each in TransferState:
            state.add_metric([t.id, each.value], 1 if t.state == each.value else 0)
        rate.add_metric([t.id], rates.get(t.id, 0.0) if t.state == "running" else 0.0)
    return [size, copied, state, rate]


def _counts(transfers: Sequence[Transfer]) -> Metric:
    counts = _gauge("reservoir_transfers", "transfers in each state", ["state"])
    for each in TransferState:
        counts.add_metric([each.value], sum(1 for t in transfers if t.state == each.value))
    return counts


AGENT_STATUSES = ("registered", "ok", "unreachable")


def _agent_families(session: Session, unreachable_after: float) -> list[Metric]:
    """Agents by status, and when each last sent a heartbeat (Unix seconds)."""
    agents = session.scalars(select(Agent).order_by(Agent.name)).all()
    statuses = [agent_status(a, unreachable_after) for a in agents]
    counts = _gauge("reservoir_agents", "registered agents by status", ["status"])
    for each in sorted({*AGENT_STATUSES, *statuses}):
        counts.add_metric([each], statuses.count(each))
    heard = _gauge(
        "reservoir_agent_last_heartbeat_timestamp_seconds",
        "when the agent's last heartbeat arrived (agents that sent one)",
        ["agent"],
    )
    for a in agents:
        if a.last_heartbeat_at is not None:
            heard.add_metric([a.name], a.last_heartbeat_at.timestamp())
    return [counts, heard]


def families(session: Session, unreachable_after: float = float("inf")) -> list[Metric]:
    """Every metric family, read from the database now."""
    transfers = session.scalars(select(Transfer).order_by(Transfer.created_at)).all()
    live = [t.id for t in transfers if t.state not in FINAL]
    samples = latest_per_stream(session, live)
    build = _gauge("reservoir_build_info", "the coordinator's version", ["version"])
    build.add_metric([__version__], 1)
    out: list[Metric] = [
        build,
        _counts(transfers),
        *_transfer_families(_shown(transfers), _rates(samples)),
        *_stream_families(samples),
        *_agent_families(session, unreachable_after),
    ]
    pacing = nic_pacing(session, live)
    if pacing:
        nic = _gauge(
            "reservoir_nic_pacing_rate_bytes_per_second",
            "a NIC's pacing rate for a transfer, as its agent reports it",
            ["transfer", "agent", "nic"],
        )
        for row, agent_name in pacing:
            nic.add_metric([row.transfer_id, agent_name, row.nic], row.rate)
        out.append(nic)
    return out


def render(session: Session, unreachable_after: float = float("inf")) -> bytes:
    """The exposition text of a registry built for this scrape (an agent silent for
    ``unreachable_after`` seconds counts as unreachable)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families(session, unreachable_after)))
    return generate_latest(registry)
