"""The agent's metrics without a network: stream and path totals read incrementally
from telemetry files written here, and the collector over an agent whose copies,
NIC pacer and target counts are set by the test, rendered and parsed back."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from test_agent_nic_pacing import Backend

from reservoir.agent.control import Agent, AgentSettings, CopyCreate, CopyJob, CopyState
from reservoir.agent.control.metrics import RECENT_SECONDS, STALE_SECONDS, AgentCollector
from reservoir.agent.control.nic_pacing import NicPacer
from reservoir.agent.control.stream_totals import CopyTotals, PathTotals, TelemetryTotals

TOKEN = "unit-token-0123456789abcdef"
Json = dict[str, Any]


def stream(time: float, stream: str, sent: int, path: str = "p1", **extra: Any) -> Json:
    return {
        "type": "stream",
        "time": time,
        "stream": stream,
        "path": path,
        "bytes": sent,
        "retransmits": 1,
        "snd_cwnd": 14480,
        "in_flight_bytes": 2896,
        "rtt": 1500,
        "busy_us": 500_000,
        **extra,
    }


def append(file: Path, *records: Json, tail: str = "") -> None:
    with open(file, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
        f.write(tail)


# ---------------------------------------------------------------- totals


def test_stream_totals_add_up_the_records_of_every_read(tmp_path: Path) -> None:
    file, paths = tmp_path / "c.jsonl", dict[str, PathTotals]()
    append(file, stream(1.0, "0", 100), stream(1.0, "1", 10), {"type": "progress", "time": 1.0})
    totals = CopyTotals(file, 0)
    totals.read(paths)
    append(file, stream(1.5, "0", 50, snd_cwnd=28960, rtt=None))
    totals.read(paths)
    s0 = totals.streams[("0", "p1")]
    assert (s0.sent_bytes, s0.retransmits, s0.busy_us) == (150, 2, 1_000_000)
    assert (s0.cwnd_bytes, s0.rtt_us, s0.time) == (28960, None, 1.5)
    assert totals.streams[("1", "p1")].sent_bytes == 10
    assert paths == {"p1": PathTotals(sent_bytes=160, retransmits=3)}


def test_a_line_being_written_waits_and_a_torn_one_is_skipped(tmp_path: Path) -> None:
    file, paths = tmp_path / "c.jsonl", dict[str, PathTotals]()
    append(file, stream(1.0, "0", 100), tail='{"type": "stream", "ti')
    totals = CopyTotals(file, 0)
    totals.read(paths)
    assert totals.streams[("0", "p1")].sent_bytes == 100
    with open(file, "a") as f:  # the line ends; then a torn one, then a good one
        f.write('me": 1.5, "stream": "0", "path": "p1", "bytes": 7}\n{"type": "str\n')
    append(file, stream(2.0, "0", 1))
    totals.read(paths)
    assert totals.streams[("0", "p1")].sent_bytes == 108


def test_reading_starts_where_the_run_began(tmp_path: Path) -> None:
    file = tmp_path / "c.jsonl"
    append(file, stream(1.0, "0", 1_000_000))  # an earlier run's
    start = file.stat().st_size
    append(file, stream(9.0, "0", 5))
    totals = CopyTotals(file, start)
    totals.read({})
    assert totals.streams[("0", "p1")].sent_bytes == 5


def test_path_records_give_the_latest_state_of_each_path(tmp_path: Path) -> None:
    file = tmp_path / "c.jsonl"
    append(
        file,
        {"type": "path", "time": 1.0, "path": "p1", "state": "failed", "reason": "silent"},
        {"type": "path", "time": 2.0, "path": "p1", "state": "up", "reason": "progress"},
        {"type": "path", "time": 2.0, "path": "p2", "state": "failed", "reason": "silent"},
    )
    totals = CopyTotals(file, 0)
    totals.read({})
    assert totals.path_states == {"p1": "up", "p2": "failed"}


def test_a_forgotten_copy_keeps_its_bytes_in_its_paths(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    append(a, stream(1.0, "0", 100))
    append(b, stream(1.0, "0", 30, path="p2"))
    everything = TelemetryTotals()
    assert set(everything.update({"a": (a, 0), "b": (b, 0)})) == {"a", "b"}
    assert set(everything.update({"b": (b, 0)})) == {"b"}
    assert everything.paths["p1"].sent_bytes == 100 and everything.paths["p2"].sent_bytes == 30


# ---------------------------------------------------------------- the collector


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    settings = AgentSettings(
        name="unit",
        tokens=[TOKEN],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        state_dir=tmp_path / "state",
        cwnd_caps="off",
        nic_pacing=False,
    )
    return Agent(settings)


def job(agent: Agent, copy_id: str, state: CopyState, *, age: float = 0.0) -> CopyJob:
    """A copy in ``state`` whose state last changed ``age`` seconds ago."""
    request = CopyCreate(source="/dev/null", dest="/dev/null", streams=2)
    out = CopyJob(copy_id, request, agent.manager.state_dir / f"{copy_id}.ck", state=state)
    out.updated = time.time() - age
    out.telemetry_from = 0
    out.progress = out.progress.model_copy(update={"total_bytes": 1 << 20, "done_bytes": 4096})
    agent.manager.jobs[copy_id] = out
    return out


def scrape(collector: AgentCollector) -> dict[str, list[Any]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def labelled(samples: list[Any], key: str) -> set[str]:
    return {s.labels[key] for s in samples}


def test_a_copy_final_for_an_hour_leaves_only_the_counts(agent: Agent) -> None:
    job(agent, "old", CopyState.COMPLETED, age=RECENT_SECONDS + 1)
    job(agent, "recent", CopyState.COMPLETED, age=60)
    job(agent, "queued", CopyState.QUEUED, age=RECENT_SECONDS + 1)
    got = scrape(AgentCollector(agent, lambda: None))
    assert labelled(got["reservoir_copy_state"], "copy") == {"recent", "queued"}
    counts = {s.labels["state"]: s.value for s in got["reservoir_copies"]}
    assert counts["completed"] == 2 and counts["queued"] == 1 and sum(counts.values()) == 3
    copied = {s.labels["copy"]: s.value for s in got["reservoir_copy_copied_bytes"]}
    assert copied == {"recent": 4096, "queued": 4096}


def test_stream_gauges_are_of_running_copies_and_their_recent_streams(agent: Agent) -> None:
    running = job(agent, "run", CopyState.RUNNING)
    ended = job(agent, "done", CopyState.COMPLETED)
    append(
        agent.manager.telemetry_path(running.id),
        stream(10.0, "0", 100),
        stream(10.0 + STALE_SECONDS + 1, "1", 100),
    )
    append(agent.manager.telemetry_path(ended.id), stream(10.0, "0", 7))
    got = scrape(AgentCollector(agent, lambda: None))
    cwnd = {(s.labels["copy"], s.labels["stream"]) for s in got["reservoir_copy_stream_cwnd_bytes"]}
    assert cwnd == {("run", "1")}  # stream 0 has not been sampled since: it ended
    sent = {
        (s.labels["copy"], s.labels["stream"]): s.value
        for s in got["reservoir_copy_stream_sent_bytes"]
    }
    assert sent == {("run", "0"): 100, ("run", "1"): 100, ("done", "0"): 7}
    rtt = got["reservoir_copy_stream_rtt_seconds"][0]
    assert rtt.value == 0.0015
    busy = got["reservoir_copy_stream_busy_seconds"][0]
    assert busy.name == "reservoir_copy_stream_busy_seconds_total" and busy.value == 0.5


def test_the_path_state_of_a_running_copy_has_one_series_per_state(agent: Agent) -> None:
    running = job(agent, "run", CopyState.RUNNING)
    append(
        agent.manager.telemetry_path(running.id),
        {"type": "path", "time": 1.0, "path": "p2", "state": "failed", "reason": "silent"},
    )
    got = scrape(AgentCollector(agent, lambda: None))
    states = {s.labels["state"]: s.value for s in got["reservoir_copy_path_state"]}
    assert states == {"up": 0, "failed": 1, "recovered": 0}


def test_nic_pacing_says_which_nics_are_paced_and_at_what_rate(
    agent: Agent, tmp_path: Path
) -> None:
    backend = Backend(missing=frozenset({"eth9"}))
    pacer = agent.manager.pacer = NicPacer(tmp_path / "pacing", backend)
    pacer.set("c1", {"eth1": 50_000_000, "eth9": 1_000_000})
    pacer.flush()
    try:
        got = scrape(AgentCollector(agent, lambda: None))
    finally:
        pacer.close()
    assert got["reservoir_nic_pacing_enabled"][0].value == 1
    assert {s.labels["nic"]: s.value for s in got["reservoir_nic_paced"]} == {"eth1": 1, "eth9": 0}
    (rate,) = got["reservoir_nic_paced_rate_bytes_per_second"]
    assert rate.labels == {"nic": "eth1", "qdisc": "tbf"} and rate.value == 50_000_000


def test_an_agent_without_target_or_pacing_declares_their_families_empty(agent: Agent) -> None:
    got = scrape(AgentCollector(agent, lambda: None))
    assert got["reservoir_nic_pacing_enabled"][0].value == 0
    for name in ("reservoir_target_sessions", "reservoir_target_commands", "reservoir_nic_paced"):
        assert got[name] == []
    assert got["reservoir_storage_engine_info"] == []
    assert got["reservoir_agent_info"][0].labels == {"agent": "unit"}


def test_the_telemetry_is_read_in_a_thread_before_the_scrape_uses_it(agent: Agent) -> None:
    """A scrape of /metrics reads the files in a thread first (the event loop carries
    the copies), and the collector then uses that read instead of reading again."""
    running = job(agent, "run", CopyState.RUNNING)
    append(agent.manager.telemetry_path(running.id), stream(10.0, "0", 100))
    collector = AgentCollector(agent, lambda: None)
    readers: list[str] = []
    update = collector.telemetry.update

    def recorded(files: Any) -> Any:
        readers.append(threading.current_thread().name)
        return update(files)

    collector.telemetry.update = recorded  # type: ignore[method-assign]
    asyncio.run(collector.read_telemetry())
    got = scrape(collector)
    assert len(readers) == 1 and readers[0] != threading.main_thread().name
    sent = {s.labels["stream"]: s.value for s in got["reservoir_copy_stream_sent_bytes"]}
    assert sent == {"0": 100}
    scrape(collector)  # called alone, it reads by itself, on the caller's thread
    assert readers[1:] == [threading.main_thread().name]
