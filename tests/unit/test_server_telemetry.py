"""Telemetry of the coordinator: parsing the agents' records with the cursor, storing
and pruning samples, the collector against a fake agent, the live feed's polls and
the Prometheus rendering."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from reservoir.server.app import events, metrics
from reservoir.server.app.agent_client import AgentRef, AgentUnreachableError
from reservoir.server.app.tables import (
    Agent,
    AgentVolume,
    NicPacingRate,
    StreamSample,
    Transfer,
    TransferLeg,
    VolumeSet,
    utcnow,
)
from reservoir.server.domain import telemetry
from reservoir.server.domain import telemetry_rollup as rollup
from reservoir.server.domain.telemetry import Cursor, LiveCursor, TelemetryCollector, parse_records

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "telemetry-lfn-2x500m-8streams.jsonl"
Json = dict[str, Any]


def rec(time: float, stream: str, bps: float = 1e6, **extra: Any) -> Json:
    return {
        "type": "stream",
        "time": time,
        "stream": stream,
        "path": "l1",
        "bits_per_second": bps,
        "snd_cwnd": 14480,
        "rtt": 1000,
        "rttvar": 100,
        "retransmits": 0,
        **extra,
    }


def parse(records: list[Json], cursor: Cursor | None = None, **kw: Any) -> Any:
    return parse_records(
        records, cursor or Cursor(), transfer_id="t", leg=0, copy_id="t-leg0", **kw
    )


# ---------------------------------------------------------------- parsing


def test_parsing_keeps_stream_records_with_iperf3_fields() -> None:
    records: list[Json] = [json.loads(line) for line in FIXTURE.read_text().splitlines()[:16]]
    samples, cursor = parse(records)
    assert len(samples) == 16
    first = next(s for s in samples if s.stream == "3" and s.time == 4.001)
    assert first.path == "l2" and first.snd_cwnd == 8094320 and first.rtt == 102002
    assert first.bits_per_second == pytest.approx(191238775.65, rel=1e-6)
    assert cursor.time == max(s.time for s in samples)
    assert cursor.streams == {s.stream for s in samples if s.time == cursor.time}


def test_parsing_skips_other_records_and_bad_values() -> None:
    records: list[Json] = [
        {"type": "progress", "time": 1.0, "bytes_done": 5},
        {"type": "path", "time": 1.0, "path": "l1", "state": "up", "reason": ""},
        {"type": "stream", "stream": "0"},  # no time
        rec(1.0, "0", bps=float("nan"), rtt=None, snd_cwnd=True),
    ]
    samples, _ = parse(records)
    assert len(samples) == 1
    assert samples[0].bits_per_second is None and samples[0].rtt is None
    assert samples[0].snd_cwnd is None


def test_what_held_a_stream_back_is_stored_as_shares_of_its_interval() -> None:
    limited = rec(1.0, "0", seconds=0.5, busy_us=500_000, rwnd_limited_us=125_000)
    late = rec(1.5, "0", seconds=0.5, busy_us=600_000, sndbuf_limited_us=-1)
    old = rec(2.0, "0", busy_us=1000)  # no interval length: no shares
    samples, _ = parse([limited, late, old])
    got = [(s.busy, s.rwnd_limited, s.sndbuf_limited) for s in samples]
    assert got == [(1.0, 0.25, None), (1.0, None, 0.0), (None, None, None)]
    assert telemetry.sample_dict(samples[0])["rwnd_limited"] == 0.25


def test_the_cursor_drops_what_was_stored_and_keeps_late_streams_of_the_same_time() -> None:
    first, cursor = parse([rec(1.0, "0"), rec(1.5, "0"), rec(1.5, "1")])
    assert len(first) == 3 and cursor == Cursor(1.5, frozenset({"0", "1"}))
    # the agent answers its last N records again, with stream 2 of t=1.5 and t=2.0
    again = [rec(1.0, "0"), rec(1.5, "0"), rec(1.5, "1"), rec(1.5, "2"), rec(2.0, "0")]
    second, cursor = parse(again, cursor)
    assert [(s.time, s.stream) for s in second] == [(1.5, "2"), (2.0, "0")]
    assert cursor == Cursor(2.0, frozenset({"0"}))
    third, same = parse([*again, rec(2.0, "0")], cursor)
    assert third == [] and same == cursor


def test_caps_and_nic_rates_come_from_the_copy() -> None:
    copy = {
        "caps": {
            "requested": {
                "stream_cwnd_caps": {"1": 120},
                "stream_pacing_rates": {},
                "nic_pacing_rates": {"eth0": 125_000_000},
            },
            "applied": True,
            "reason": "",
        }
    }
    caps = telemetry.stream_caps(copy)
    samples, _ = parse([rec(1.0, "0"), rec(1.0, "1")], caps=caps)
    assert {s.stream: s.cap for s in samples} == {"0": None, "1": 120}
    assert telemetry.nic_rates(copy) == {"eth0": 125_000_000}
    assert telemetry.nic_rates({"caps": None}) is None
    assert telemetry.stream_caps(None) == {}


# ---------------------------------------------------------------- storage


def make_transfer(session: Session, state: str = "running", copy_state: str = "running") -> str:
    agent = Agent(
        name="a",
        control_url="http://127.0.0.1:1",
        capabilities=[],
    )
    session.add(agent)
    session.flush()
    volume = AgentVolume(
        agent_id=agent.id, name="v0", path="/dev/null", size_bytes=1 << 20, block_size=512
    )
    src, dst = VolumeSet(name="src", stripe_unit=1 << 20), VolumeSet(name="dst", stripe_unit=1)
    session.add_all([volume, src, dst])
    session.flush()
    transfer = Transfer(
        source_set_id=src.id,
        dest_set_id=dst.id,
        streams_per_pair=2,
        pacing_policy="off",
        pacing_margin=0.0,
        equalizer=False,
        verify=False,
        state=state,
        total_bytes=1 << 20,
        done_bytes=1 << 19,
    )
    session.add(transfer)
    session.flush()
    session.add(
        TransferLeg(
            transfer_id=transfer.id,
            index=0,
            source_volume_id=volume.id,
            dest_volume_id=volume.id,
            bytes=1 << 20,
            streams=2,
            link_ids=[],
            state=state,
            copy_id=f"{transfer.id}-leg0",
            copy_state=copy_state,
        )
    )
    session.commit()
    return transfer.id


def store(session: Session, tid: str, records: list[Json]) -> None:
    samples, _ = parse_records(records, Cursor(), transfer_id=tid, leg=0, copy_id=f"{tid}-leg0")
    session.add_all(samples)
    session.commit()


def count(session: Session) -> int:
    return int(session.scalar(select(func.count(StreamSample.id))) or 0)


def test_retention_keeps_the_last_window_and_at_most_n_rows(
    sessions: sessionmaker[Session],
) -> None:
    with sessions() as session:
        tid = make_transfer(session)
        store(session, tid, [rec(float(t), s) for t in range(100) for s in "01"])
        assert telemetry.prune(session, tid, keep_rows=1000) == 0  # 100 s: no tier reached
        assert telemetry.prune(session, tid, keep_seconds=49.5, keep_rows=1000) == 100
        session.commit()
        assert session.scalar(select(func.min(StreamSample.time))) == 50.0
        assert telemetry.prune(session, tid, keep_seconds=1e9, keep_rows=10) == 90
        session.commit()
        assert count(session) == 10
        assert session.scalar(select(func.min(StreamSample.time))) == 95.0
        assert telemetry.prune(session, "no-such-transfer") == 0


def test_listing_is_newest_last_after_since_and_limited(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        tid = make_transfer(session)
        store(session, tid, [rec(float(t), s) for t in range(10) for s in "01"])
        got = telemetry.list_samples(session, tid, since=6.0, limit=3)
        assert [(s.time, s.stream) for s in got] == [(8.0, "1"), (9.0, "0"), (9.0, "1")]
        assert len(telemetry.list_samples(session, tid)) == 20
        latest = telemetry.latest_per_stream(session, [tid])
        assert {(s.stream, s.time) for s in latest} == {("0", 9.0), ("1", 9.0)}


def test_listing_until_pages_back_through_a_long_history(
    sessions: sessionmaker[Session],
) -> None:
    with sessions() as session:
        tid = make_transfer(session)
        store(session, tid, [rec(float(t), s) for t in range(10) for s in "01"])
        got = telemetry.list_samples(session, tid, until=4.0, limit=3)
        assert [(s.time, s.stream) for s in got] == [(3.0, "1"), (4.0, "0"), (4.0, "1")]
        seen: set[tuple[float, str]] = set()
        until: float | None = None
        while True:  # what a client does: newest page first, then back in time
            page = telemetry.list_samples(session, tid, until=until, limit=5)
            fresh = {(s.time, s.stream) for s in page} - seen
            seen |= fresh
            if len(page) < 5 or not fresh:
                break
            until = page[0].time
        assert seen == {(float(t), s) for t in range(10) for s in "01"}


class FakeAgent:
    def __init__(self) -> None:
        self.records: list[Json] = []
        self.copy: Json | None = {"id": "x", "state": "running", "caps": None}
        self.down = False
        self.asked: list[str] = []

    async def get_copy(self, agent: AgentRef, copy_id: str) -> Json | None:
        if self.down:
            raise AgentUnreachableError("down")
        return self.copy

    async def get_telemetry(self, agent: AgentRef, copy_id: str, limit: int) -> list[Json]:
        self.asked.append(copy_id)
        if self.down:
            raise AgentUnreachableError("down")
        return self.records[-limit:]

    async def aclose(self) -> None:
        return None


def test_the_collector_stores_new_samples_once_and_fetches_a_last_time(
    sessions: sessionmaker[Session],
) -> None:
    with sessions() as session:
        tid = make_transfer(session)
    fake = FakeAgent()
    collector = TelemetryCollector(sessions, fake, limit=4)
    fake.records = [rec(1.0, "0"), rec(1.0, "1"), {"type": "progress", "time": 1.0}]
    assert asyncio.run(collector.tick()) == 2
    fake.records += [rec(1.5, "0"), rec(1.5, "1")]
    fake.copy = {
        "caps": {"requested": {"stream_cwnd_caps": {"0": 50}, "nic_pacing_rates": {"lo": 10**6}}}
    }
    assert asyncio.run(collector.tick()) == 2  # the limit of 4 still overlaps
    fake.down = True
    assert asyncio.run(collector.tick()) == 0
    fake.down = False
    with sessions() as session:
        leg = session.scalars(select(TransferLeg)).one()
        leg.copy_state = "completed"
        session.commit()
    fake.records += [rec(2.0, "0"), rec(2.0, "1")]
    assert asyncio.run(collector.tick()) == 2  # the last fetch
    asked = len(fake.asked)
    assert asyncio.run(collector.tick()) == 0
    assert len(fake.asked) == asked  # not asked again
    with sessions() as session:
        samples = telemetry.list_samples(session, tid)
        assert [(s.time, s.stream, s.cap) for s in samples][2:4] == [
            (1.5, "0", 50),
            (1.5, "1", None),
        ]
        assert len(samples) == 6
        rate = session.scalars(select(NicPacingRate)).one()
        assert (rate.nic, rate.rate) == ("lo", 10**6)


def test_a_copy_that_stopped_on_its_agent_wakes_the_scheduler(
    sessions: sessionmaker[Session],
) -> None:
    with sessions() as session:
        make_transfer(session)
    fake, woken = FakeAgent(), []
    collector = TelemetryCollector(sessions, fake, on_copy_ended=lambda: woken.append(1))
    fake.copy = {"state": "running"}
    asyncio.run(collector.tick())
    assert woken == []
    fake.copy = {"state": "completed"}
    asyncio.run(collector.tick())
    assert woken == [1]


def test_a_new_collector_resumes_from_the_database(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        make_transfer(session)
    fake = FakeAgent()
    fake.records = [rec(1.0, "0"), rec(1.0, "1")]
    assert asyncio.run(TelemetryCollector(sessions, fake).tick()) == 2
    fake.records.append(rec(1.5, "0"))
    assert asyncio.run(TelemetryCollector(sessions, fake).tick()) == 1


def test_live_polls_give_state_events_and_new_samples_then_end(
    sessions: sessionmaker[Session],
) -> None:
    with sessions() as session:
        tid = make_transfer(session)
        store(session, tid, [rec(1.0, "0")])
        cursor = LiveCursor(sample_id=telemetry.newest_sample_id(session, tid))
        events.record(session, session.get(Transfer, tid), "scheduler", "hello")  # type: ignore[arg-type]
        session.commit()
        items, final = telemetry.live_poll(session, tid, cursor)
        assert [name for name, _ in items] == ["transfer", "event"] and not final
        store(session, tid, [rec(1.5, "0"), rec(1.5, "1")])
        items, final = telemetry.live_poll(session, tid, cursor)
        assert [name for name, _ in items] == ["samples"] and len(items[0][1]) == 2
        transfer = session.get(Transfer, tid)
        assert transfer is not None
        transfer.state, transfer.done_bytes = "completed", transfer.total_bytes
        session.commit()
        items, final = telemetry.live_poll(session, tid, cursor)
        assert items[0][1]["state"] == "completed" and final
        assert telemetry.live_poll(session, "gone", LiveCursor()) == ([], True)


# ---------------------------------------------------------------- metrics


def scrape(session: Session) -> dict[str, list[Any]]:
    text = metrics.render(session).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_metrics_have_transfer_stream_cap_and_nic_series(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        tid = make_transfer(session)
        store(session, tid, [rec(1.0, "0", 1e6), rec(1.0, "1", 3e6)])
        store(session, tid, [rec(5.0, "0", 2e6), rec(5.0, "1", 4e6, rtt=250_000)])
        got = scrape(session)
        assert "reservoir_nic_pacing_rate_bytes_per_second" not in got
        assert "reservoir_stream_cwnd_cap_segments" not in got
        agent = session.scalars(select(Agent)).one()
        telemetry.record_nic_rates(session, tid, agent.id, {"lo": 10**6})
        store(session, tid, [rec(5.5, "0", 2e6)])
        session.execute(
            StreamSample.__table__.update()  # type: ignore[attr-defined]
            .where(StreamSample.time == 5.5)
            .values(cap=10)
        )
        session.commit()
        got = scrape(session)
    one = {(s.name, s.labels.get("stream")): s for fam in got.values() for s in fam}
    assert one[("reservoir_transfer_copied_bytes_total", None)].value == 1 << 19
    assert one[("reservoir_transfer_size_bytes", None)].value == 1 << 20
    assert one[("reservoir_transfer_throughput_bytes_per_second", None)].value == 6e6 / 8
    assert one[("reservoir_stream_throughput_bytes_per_second", "1")].value == 4e6 / 8
    assert one[("reservoir_stream_rtt_seconds", "1")].value == 0.25
    assert one[("reservoir_stream_cwnd_bytes", "0")].value == 14480
    assert one[("reservoir_stream_cwnd_cap_segments", "0")].value == 10
    nic = got["reservoir_nic_pacing_rate_bytes_per_second"][0]
    assert nic.labels == {"transfer": tid, "agent": "a", "nic": "lo"} and nic.value == 1e6
    states = {s.labels["state"]: s.value for s in got["reservoir_transfer_state"]}
    assert states["running"] == 1 and sum(states.values()) == 1 and len(states) == 6
    assert (
        got["reservoir_build_info"][0].labels["version"]
        and got["reservoir_build_info"][0].value == 1
    )
    counts = {s.labels["state"]: s.value for s in got["reservoir_transfers"]}
    assert counts["running"] == 1 and sum(counts.values()) == 1
    kinds = {
        f.name: f.type for f in text_string_to_metric_families(metrics.render(session).decode())
    }
    assert kinds["reservoir_transfer_copied_bytes"] == "counter"


def test_final_transfers_keep_only_their_transfer_series(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        tid = make_transfer(session, state="completed", copy_state="completed")
        store(session, tid, [rec(1.0, "0")])
        got = scrape(session)
    assert got["reservoir_transfer_throughput_bytes_per_second"][0].value == 0
    assert got["reservoir_stream_throughput_bytes_per_second"] == []


def test_a_transfer_final_for_an_hour_leaves_only_the_counts(
    sessions: sessionmaker[Session],
) -> None:
    with sessions() as session:
        tid = make_transfer(session, state="completed", copy_state="completed")
        transfer = session.get(Transfer, tid)
        assert transfer is not None
        transfer.updated_at = utcnow() - timedelta(seconds=metrics.RECENT_SECONDS + 1)
        session.commit()
        got = scrape(session)
    assert got["reservoir_transfer_size_bytes"] == []  # no series of its own any more
    counts = {s.labels["state"]: s.value for s in got["reservoir_transfers"]}
    assert counts["completed"] == 1


# ---------------------------------------------------------------- a long history


def test_a_long_history_is_kept_whole_and_coarser_further_back(
    sessions: sessionmaker[Session],
) -> None:
    """Two streams at 2 Hz for an hour, with tiers of 10 s after 2 minutes and 60 s after
    15 minutes: the bytes and retransmits of the whole history stay, each stream's
    history reaches back to its start, and the last 2 minutes stay at full rate."""
    tiers = ((120.0, 10.0), (900.0, 60.0))
    with sessions() as session:
        tid = make_transfer(session)
        records = [
            rec(t / 2, s, bps=8e6 + 1e6 * (t % 7), seconds=0.5, retransmits=t % 3)
            for t in range(1, 3600 * 2 + 1)
            for s in "01"
        ]
        store(session, tid, records)
        before = _totals(session)
        removed = rollup.downsample(session, tid, tiers)
        session.commit()
        after = _totals(session)
        again = rollup.downsample(session, tid, tiers)
        rows = session.scalars(select(StreamSample).order_by(StreamSample.time)).all()
    assert again == 0  # idempotent
    assert removed == len(records) - len(rows)
    full = 2 * 2 * 120  # the last 2 minutes, both streams
    coarse = 2 * (900 - 120) // 10 + 2 * (3600 - 900) // 60
    assert abs(len(rows) - (full + coarse)) <= 8  # buckets cut by the tier boundaries
    assert after["bytes"] == pytest.approx(before["bytes"], rel=1e-9)
    assert after["retransmits"] == before["retransmits"]
    for stream in "01":
        mine = [r for r in rows if r.stream == stream]
        assert mine[0].time <= 60.0  # reaches back to the start
        assert all(r.span == 0.5 for r in mine if r.time > 3600 - 120)
        assert {r.span for r in mine if 60 < r.time < 3600 - 900 - 60} == {60.0}


def test_merging_weights_by_span_and_keeps_the_last_cap_and_path() -> None:
    a = StreamSample(time=1.0, stream="0", bits_per_second=1e6, span=1.0, rtt=1000,
                     retransmits=2, cap=10, path="l1", busy=0.5)  # fmt: skip
    b = StreamSample(time=4.0, stream="0", bits_per_second=4e6, span=3.0, rtt=2000,
                     retransmits=None, cap=20, path="l2", busy=None)  # fmt: skip
    merged = rollup.merge([a, b])
    assert merged is b
    assert b.bits_per_second == pytest.approx((1e6 * 1 + 4e6 * 3) / 4)
    assert b.rtt == 1750 and b.retransmits == 2 and b.span == 4.0
    assert b.cap == 20 and b.path == "l2" and b.busy == 0.5


def _totals(session: Session) -> dict[str, float]:
    rows = session.scalars(select(StreamSample)).all()
    return {
        "bytes": sum((r.bits_per_second or 0) * (r.span or 0.5) / 8 for r in rows),
        "retransmits": sum(r.retransmits or 0 for r in rows),
    }
