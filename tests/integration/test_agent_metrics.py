"""The agent's ``/metrics`` on a real agent (its API on uvicorn in a thread, its builtin
target serving a LUN file): a real copy over loopback from one of its source volumes
into its own LUN, scraped while it runs and once it completed. The text parses with
the client's parser, each family has its documented type, unit and labels, the byte
counters add up to the copy's size, and ``promtool check metrics`` finds no problem."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from reservoir.agent.storage import _read_back

from .agents import API_TOKEN, RunningAgent, real_agent

pytestmark = pytest.mark.integration

MiB = 1 << 20
SIZE = 16 * MiB
STREAMS = 2
STREAM_RATE = 3 * MiB  # bytes/s per stream (SO_MAX_PACING_RATE): the copy takes ~3 s
Json = dict[str, Any]

# family -> (type, label names); the unit is the name's last word (bytes, seconds)
FAMILIES: dict[str, tuple[str, set[str]]] = {
    "reservoir_build_info": ("gauge", {"version"}),
    "reservoir_agent_info": ("gauge", {"agent"}),
    "reservoir_copies": ("gauge", {"state"}),
    "reservoir_copy_state": ("gauge", {"copy", "state"}),
    "reservoir_copy_size_bytes": ("gauge", {"copy"}),
    "reservoir_copy_copied_bytes": ("counter", {"copy"}),
    "reservoir_copy_sent_bytes": ("counter", {"copy"}),
    "reservoir_copy_streams": ("gauge", {"copy"}),
    "reservoir_copy_streams_up": ("gauge", {"copy"}),
    "reservoir_copy_paths": ("gauge", {"copy"}),
    "reservoir_copy_paths_up": ("gauge", {"copy"}),
    "reservoir_copy_stream_sent_bytes": ("counter", {"copy", "stream", "path"}),
    "reservoir_copy_stream_retransmits": ("counter", {"copy", "stream", "path"}),
    "reservoir_copy_stream_busy_seconds": ("counter", {"copy", "stream", "path"}),
    "reservoir_copy_stream_rwnd_limited_seconds": ("counter", {"copy", "stream", "path"}),
    "reservoir_copy_stream_sndbuf_limited_seconds": ("counter", {"copy", "stream", "path"}),
    "reservoir_copy_stream_cwnd_bytes": ("gauge", {"copy", "stream", "path"}),
    "reservoir_copy_stream_in_flight_bytes": ("gauge", {"copy", "stream", "path"}),
    "reservoir_copy_stream_rtt_seconds": ("gauge", {"copy", "stream", "path"}),
    "reservoir_copy_path_state": ("gauge", {"copy", "path", "state"}),
    "reservoir_path_sent_bytes": ("counter", {"path"}),
    "reservoir_path_retransmits": ("counter", {"path"}),
    "reservoir_nic_pacing_enabled": ("gauge", set()),
    "reservoir_nic_paced": ("gauge", {"nic"}),
    "reservoir_nic_paced_rate_bytes_per_second": ("gauge", {"nic", "qdisc"}),
    "reservoir_target_sessions": ("gauge", {"target"}),
    "reservoir_target_connections": ("gauge", {"target"}),
    "reservoir_target_commands": ("counter", {"target", "kind"}),
    "reservoir_target_read_bytes": ("counter", {"target"}),
    "reservoir_target_written_bytes": ("counter", {"target"}),
    "reservoir_storage_engine_info": ("gauge", {"engine", "backend"}),
    "reservoir_storage_requests": ("counter", {"engine", "op"}),
    "reservoir_storage_page_cache_reads": ("counter", {"engine"}),
    "reservoir_storage_read_bytes": ("counter", {"engine"}),
    "reservoir_storage_written_bytes": ("counter", {"engine"}),
    "reservoir_storage_direct_written_bytes": ("counter", {"engine"}),
    "reservoir_buffer_bytes": ("gauge", {"buffers"}),
}


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[RunningAgent]:
    """An agent with one source volume of random bytes and one LUN of its own target."""
    with real_agent(tmp_path, "m", sources=1, luns=1, size=SIZE) as running:
        running.sources[0].write_bytes(os.urandom(SIZE))
        yield running


@pytest.fixture
def api(agent: RunningAgent) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    with httpx.Client(base_url=agent.url, headers=headers, timeout=30) as c:
        yield c


def scrape(c: httpx.Client) -> str:
    r = c.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return r.text


def parse(text: str) -> dict[str, Metric]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families: dict[str, Metric], sample: str, **labels: str) -> float:
    """The value of the one sample named ``sample`` with these labels (among others)."""
    family = sample.removesuffix("_total")
    found = [
        s.value
        for s in families[family].samples
        if s.name == sample and labels.items() <= s.labels.items()
    ]
    assert len(found) == 1, (sample, labels, families[family].samples)
    return found[0]


def start_copy(c: httpx.Client, agent: RunningAgent, **extra: Any) -> str:
    """A copy of the agent's source volume into LUN 0 of its own target."""
    body = {
        "source": str(agent.sources[0]),
        "dest": f"iscsi://{agent.portal}/{agent.iqn}/0",
        "streams": STREAMS,
        "extent_size": 4 * MiB,
        **extra,
    }
    r = c.post("/api/v1/copies", json=body)
    assert r.status_code == 201, r.text
    copy_id: str = r.json()["id"]
    return copy_id


def wait_copy(c: httpx.Client, copy_id: str, until: Callable[[Json], bool]) -> Json:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        data: Json = c.get(f"/api/v1/copies/{copy_id}").json()
        if until(data):
            return data
        assert data["state"] in ("queued", "running"), data
        time.sleep(0.05)
    raise AssertionError(f"copy {copy_id} still {data['state']}")


def completed(c: httpx.Client, agent: RunningAgent) -> tuple[str, dict[str, Metric]]:
    copy_id = start_copy(c, agent)
    wait_copy(c, copy_id, lambda d: d["state"] == "completed")
    return copy_id, parse(scrape(c))


def promtool_problems(text: str) -> str:
    """What ``promtool check metrics`` says of ``text`` (empty: nothing), or a skip."""
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    run = subprocess.run(
        ["promtool", "check", "metrics"],
        input=text,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    problems = (run.stdout + run.stderr).strip()
    return problems or ("" if run.returncode == 0 else f"exit status {run.returncode}")


# ---------------------------------------------------------------- authentication


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789abcdef"])
def test_metrics_need_one_of_the_agents_tokens(agent: RunningAgent, token: str | None) -> None:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    r = httpx.get(f"{agent.url}/metrics", headers=headers, timeout=30)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"


# ---------------------------------------------------------------- families


def test_every_family_has_its_type_and_labels(agent: RunningAgent, api: httpx.Client) -> None:
    _, got = completed(api, agent)
    assert {name: f.type for name, f in got.items()} == {
        name: kind for name, (kind, _) in FAMILIES.items()
    }
    for name, (_, labels) in FAMILIES.items():
        for sample in got[name].samples:
            assert set(sample.labels) == labels, (name, sample)
            assert sample.name in (name, f"{name}_total"), sample
            if got[name].type == "counter":
                assert sample.name == f"{name}_total"


def test_a_completed_copy_counts_its_size_in_every_byte_counter(
    agent: RunningAgent, api: httpx.Client
) -> None:
    copy_id, got = completed(api, agent)
    assert value(got, "reservoir_agent_info", agent="m") == 1
    assert value(got, "reservoir_copies", state="completed") == 1
    assert value(got, "reservoir_copy_state", copy=copy_id, state="completed") == 1
    assert value(got, "reservoir_copy_size_bytes", copy=copy_id) == SIZE
    assert value(got, "reservoir_copy_copied_bytes_total", copy=copy_id) == SIZE
    assert value(got, "reservoir_copy_sent_bytes_total", copy=copy_id) == SIZE
    assert value(got, "reservoir_target_written_bytes_total", target=agent.iqn) == SIZE
    assert value(got, "reservoir_target_commands_total", target=agent.iqn, kind="write") == (
        SIZE // MiB  # the engine writes 1 MiB pieces
    )
    # and a block 0 rewritten by the COMPARE AND WRITE with which a stream that does
    # not hold the copy's reservation checks that it may write (the copy's hold)
    stored = value(got, "reservoir_storage_written_bytes_total", engine="target")
    assert SIZE <= stored <= SIZE + (STREAMS - 1) * 512
    # the copy's 1 MiB writes went past the page cache (the LUN's bulk writes), the
    # COMPARE AND WRITEs of one block through it
    assert value(got, "reservoir_storage_direct_written_bytes_total", engine="target") == SIZE
    assert value(got, "reservoir_buffer_bytes", buffers="target_arena_lent") == 0
    assert value(got, "reservoir_buffer_bytes", buffers="target_lent") == 0
    # the end check read the LUN back in read-back threads, each holding one buffer: at
    # most a pool of them for the target's engine and one for the copies' (the source)
    read_back = value(got, "reservoir_buffer_bytes", buffers="read_back")
    assert 0 < read_back <= 2 * _read_back.WORKERS * _read_back.DIRECT_CHUNK
    stream_sent = {
        s.labels["stream"]: s.value
        for s in got["reservoir_copy_stream_sent_bytes"].samples
        if s.labels["copy"] == copy_id
    }
    assert set(stream_sent) == {str(i) for i in range(STREAMS)}
    # TCP bytes acknowledged: the data and its iSCSI headers (48 bytes a PDU), commands
    assert SIZE <= sum(stream_sent.values()) < SIZE * 1.01
    paths = got["reservoir_path_sent_bytes"].samples
    assert sum(s.value for s in paths) == sum(stream_sent.values())


def test_a_copy_out_of_the_targets_lun_counts_its_reads(
    agent: RunningAgent, api: httpx.Client
) -> None:
    completed(api, agent)  # the LUN now holds the source's bytes
    back = start_copy(
        api, agent, source=f"iscsi://{agent.portal}/{agent.iqn}/0", dest=str(agent.sources[0])
    )
    wait_copy(api, back, lambda d: d["state"] == "completed")
    got = parse(scrape(api))
    assert value(got, "reservoir_target_read_bytes_total", target=agent.iqn) == SIZE
    assert value(got, "reservoir_target_commands_total", target=agent.iqn, kind="read") > 0
    assert value(got, "reservoir_storage_written_bytes_total", engine="copies") == SIZE


def test_the_targets_sessions_are_its_warm_sessions_after_a_copy(
    agent: RunningAgent, api: httpx.Client
) -> None:
    _, got = completed(api, agent)
    assert value(got, "reservoir_target_sessions", target=agent.iqn) == STREAMS
    assert value(got, "reservoir_target_connections", target=agent.iqn) == STREAMS
    assert value(got, "reservoir_storage_engine_info", engine="target") == 1


def test_a_running_copy_has_the_state_of_its_streams(
    agent: RunningAgent, api: httpx.Client
) -> None:
    rates = {str(s): STREAM_RATE for s in range(STREAMS)}
    copy_id = start_copy(api, agent, caps={"stream_pacing_rates": rates})
    deadline = time.monotonic() + 30
    streams: set[str] = set()
    while streams != {"0", "1"} and time.monotonic() < deadline:
        got = parse(scrape(api))
        streams = {
            s.labels["stream"]
            for s in got["reservoir_copy_stream_cwnd_bytes"].samples
            if s.labels["copy"] == copy_id
        }
        time.sleep(0.1)
    assert streams == {"0", "1"}
    assert value(got, "reservoir_copy_state", copy=copy_id, state="running") == 1
    assert value(got, "reservoir_copy_stream_rtt_seconds", copy=copy_id, stream="0") > 0
    wait_copy(api, copy_id, lambda d: d["state"] == "completed")
    done = parse(scrape(api))
    assert done["reservoir_copy_stream_cwnd_bytes"].samples == []  # it no longer runs
    assert value(done, "reservoir_copy_stream_sent_bytes_total", copy=copy_id, stream="0") > 0


def test_promtool_finds_no_problem_in_a_scrape(agent: RunningAgent, api: httpx.Client) -> None:
    completed(api, agent)
    assert promtool_problems(scrape(api)) == ""
