"""``/metrics``: the coordinator's state in Prometheus' text format.

Every scrape builds its own :class:`~prometheus_client.CollectorRegistry` from the
database (no process-wide metric state: several coordinators, restarts and tests
see the same numbers). Series, all gauges:

==================================================  =================================
``reservoir_transfer_total_bytes{transfer}``        the transfer's size
``reservoir_transfer_done_bytes{transfer}``         bytes copied so far
``reservoir_transfer_state{transfer,state}``        1 for its current state
``reservoir_transfer_rate_bits_per_second``         running transfers: the sum of its
``{transfer}``                                      streams' latest throughput samples
``reservoir_stream_throughput_bits_per_second``     per stream of a transfer that is
``reservoir_stream_cwnd_bytes``                     not final (completed, cancelled),
``reservoir_stream_rtt_seconds``                    from its latest sample; labels
``reservoir_stream_retransmits``                    ``transfer, leg, copy, stream,
``reservoir_stream_cwnd_cap_segments``              path``; the cap only if one is set
``reservoir_nic_pacing_rate_bytes_per_second``      per NIC pacing rate the agents
``{transfer,agent,nic}``                            report (omitted when none)
==================================================  =================================

A stream counts in a transfer's rate if its latest sample is at most
:data:`STALE_SECONDS` older than the transfer's newest sample (a stream that ended
does not count).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import select
from sqlalchemy.orm import Session

from reservoir.server.app.tables import StreamSample, Transfer
from reservoir.server.domain.telemetry import FINAL, latest_per_stream, nic_pacing

__all__ = ["CONTENT_TYPE", "STALE_SECONDS", "families", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STALE_SECONDS = 2.0
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
        "reservoir_stream_throughput_bits_per_second",
        "a stream's acknowledged throughput in its latest sample",
        STREAM_LABELS,
    )
    cwnd = _gauge("reservoir_stream_cwnd_bytes", "a stream's congestion window", STREAM_LABELS)
    rtt = _gauge("reservoir_stream_rtt_seconds", "a stream's smoothed RTT", STREAM_LABELS)
    retrans = _gauge(
        "reservoir_stream_retransmits",
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
            rate.add_metric(labels, s.bits_per_second)
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
    newest: dict[str, float] = {}
    for s in samples:
        newest[s.transfer_id] = max(newest.get(s.transfer_id, s.time), s.time)
    rates: dict[str, float] = {}
    for s in samples:
        if s.bits_per_second is not None and s.time >= newest[s.transfer_id] - STALE_SECONDS:
            rates[s.transfer_id] = rates.get(s.transfer_id, 0.0) + s.bits_per_second
    return rates


def families(session: Session) -> list[Metric]:
    """Every metric family, read from the database now."""
    transfers = session.scalars(select(Transfer).order_by(Transfer.created_at)).all()
    live = [t.id for t in transfers if t.state not in FINAL]
    samples = latest_per_stream(session, live)
    rates = _rates(samples)
    total = _gauge("reservoir_transfer_total_bytes", "a transfer's size", ["transfer"])
    done = _gauge("reservoir_transfer_done_bytes", "bytes a transfer has copied", ["transfer"])
    state = _gauge(
        "reservoir_transfer_state", "1 for the transfer's current state", ["transfer", "state"]
    )
    rate = _gauge(
        "reservoir_transfer_rate_bits_per_second",
        "a running transfer's throughput: the sum of its streams' latest samples",
        ["transfer"],
    )
    for t in transfers:
        total.add_metric([t.id], t.total_bytes)
        done.add_metric([t.id], t.done_bytes)
        state.add_metric([t.id, t.state], 1)
        rate.add_metric([t.id], rates.get(t.id, 0.0) if t.state == "running" else 0.0)
    out: list[Metric] = [total, done, state, rate, *_stream_families(samples)]
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


def render(session: Session) -> bytes:
    """The exposition text of a registry built for this scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families(session)))
    return generate_latest(registry)
