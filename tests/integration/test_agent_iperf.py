"""iperf3 through a real agent (uvicorn in a thread) on loopback: a one-shot server, a
client run polled to its result, the concurrency bound, and the kill on stop."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reservoir.agent.control import Agent, AgentSettings, make_server
from reservoir.agent.control.iperf import MAX_ACTIVE
from reservoir.lab.peers import free_port

from .servers import running

pytestmark = pytest.mark.integration

TOKEN = "test-token-0123456789abcdef"


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[Agent, httpx.Client]]:
    settings = AgentSettings(
        name="agent-iperf",
        listen=f"127.0.0.1:{free_port()}",
        tokens=[TOKEN],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        state_dir=tmp_path / "state",
        cwnd_caps="off",
    )
    agent = Agent(settings)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with running(make_server(settings, agent), "agent-api"):
        url = f"http://{settings.host}:{settings.port}/api/v1"
        with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
            yield agent, c


def poll(c: httpx.Client, run_id: str, limit: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        body: dict[str, Any] = c.get(f"/iperf/runs/{run_id}").json()
        if body["state"] != "running":
            return body
        time.sleep(0.2)
    raise AssertionError(f"iperf3 run {run_id} still running after {limit} s")


def test_paced_run_against_a_one_shot_server_gives_the_paced_aggregate(
    agent: tuple[Agent, httpx.Client],
) -> None:
    _, c = agent
    r = c.post("/iperf/servers", json={"address": "127.0.0.1", "timeout": 30})
    assert r.status_code == 201, r.text
    server = r.json()
    assert server["state"] == "listening" and server["port"] > 0
    body = {"host": "127.0.0.1", "port": server["port"], "streams": 2, "duration": 2}
    r = c.post("/iperf/runs", json={**body, "fq_rate_bps": 200_000_000})
    assert r.status_code == 202 and r.json()["state"] == "running"
    done = poll(c, r.json()["id"])
    assert done["state"] == "completed", done["error"]
    result = done["result"]
    assert result["streams"] == 2 and len(result["stream_bits_per_second"]) == 2
    assert 0.8 * 400e6 < result["bits_per_second"] < 1.05 * 400e6
    assert "host_total" in result["cpu_utilization_percent"]
    deadline = time.monotonic() + 5
    while c.get(f"/iperf/servers/{server['id']}").json()["state"] == "listening":
        assert time.monotonic() < deadline, "the one-shot server did not exit after its test"
        time.sleep(0.1)
    assert c.get(f"/iperf/servers/{server['id']}").json()["state"] == "finished"


def test_run_to_a_closed_port_fails_with_iperf3s_error(agent: tuple[Agent, httpx.Client]) -> None:
    _, c = agent
    r = c.post("/iperf/runs", json={"host": "127.0.0.1", "port": free_port(), "duration": 1})
    done = poll(c, r.json()["id"])
    assert done["state"] == "failed"
    assert "Connection refused" in done["error"]
    assert c.get("/health").status_code == 200


def test_server_on_a_port_in_use_is_409(agent: tuple[Agent, httpx.Client]) -> None:
    _, c = agent
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = c.post("/iperf/servers", json={"address": "127.0.0.1", "port": s.getsockname()[1]})
    assert r.status_code == 409 and "in use" in r.json()["detail"]


def test_servers_beyond_the_bound_are_429_and_all_are_killed_on_stop(tmp_path: Path) -> None:
    settings = AgentSettings(
        name="agent-iperf",
        listen=f"127.0.0.1:{free_port()}",
        tokens=[TOKEN],  # type: ignore[list-item]
        state_dir=tmp_path / "state",
        cwnd_caps="off",
    )
    agent = Agent(settings)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with running(make_server(settings, agent), "agent-api"):
        url = f"http://{settings.host}:{settings.port}/api/v1"
        with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
            for _ in range(MAX_ACTIVE):
                assert c.post("/iperf/servers", json={"address": "127.0.0.1"}).status_code == 201
            r = c.post("/iperf/servers", json={"address": "127.0.0.1"})
            assert r.status_code == 429 and "try again later" in r.json()["detail"]
            pids = [job.proc.pid for job in agent.iperf.servers.values()]
    for job in agent.iperf.servers.values():
        assert job.state == "stopped" and job.proc.returncode is not None
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
