"""An agent's /info and iperf3 API through the coordinator, on loopback: a real
coordinator (uvicorn in a thread, temporary SQLite) and a real agent (uvicorn in a
thread), as test_server_scheduler.py runs them, configured with the digest of the
coordinator's token for it. Registered beside the agent: one whose control URL nobody
listens on, and one registered at the agent's URL under another name (so with another
agent's token, which the agent refuses)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from reservoir.agent.control import Agent, AgentSettings
from reservoir.agent.control import make_server as make_agent_server
from reservoir.agent.control.info import congestion_control
from reservoir.lab.peers import free_port
from reservoir.server import ServerSettings
from reservoir.server import make_server as make_coordinator
from reservoir.server.app.core.agent_credentials import AgentCredentials

from .servers import running

pytestmark = pytest.mark.integration

USER = "itest-user-token-0123456789abcdef"
Json = dict[str, Any]


@dataclass
class Site:
    c: httpx.Client  # the coordinator's API, with a user's token
    up: str  # the real agent's id at the coordinator
    down: str  # an agent nobody answers for
    wrong_token: str  # the real agent, registered under a name whose token it does not know


def register(c: httpx.Client, name: str, port: int) -> str:
    body = {"name": name, "control_url": f"http://127.0.0.1:{port}"}
    r = c.post("/agents", json=body)
    assert r.status_code == 201, r.text
    agent_id: str = r.json()["id"]
    return agent_id


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("agent-proxy")
    credentials = AgentCredentials.from_file(tmp / "server.key")  # the coordinator's, below
    agent_settings = AgentSettings(
        name="edge-a",
        listen=f"127.0.0.1:{free_port()}",
        tokens=[credentials.control_digest("edge-a")],  # type: ignore[list-item]
        state_dir=tmp / "edge-a",
        cwnd_caps="off",
    )
    port = free_port()
    settings = ServerSettings(
        database_url=f"sqlite:///{tmp / 'server.db'}",
        listen=f"127.0.0.1:{port}",
        user_tokens=[USER],  # type: ignore[list-item]
        scheduler="off",
    )
    agent_server = make_agent_server(agent_settings, Agent(agent_settings))
    with (
        running(agent_server, "agent-edge-a"),
        running(make_coordinator(settings), "coordinator"),
        httpx.Client(
            base_url=f"http://127.0.0.1:{port}/api/v1",
            headers={"Authorization": f"Bearer {USER}"},
            timeout=60,
        ) as c,
    ):
        yield Site(
            c,
            up=register(c, "edge-a", agent_settings.port),
            down=register(c, "edge-down", free_port()),
            wrong_token=register(c, "edge-wrong", agent_settings.port),
        )


def need_iperf3() -> None:
    if shutil.which("iperf3") is None:
        pytest.skip("iperf3 is not installed (run make install)")


def poll(c: httpx.Client, path: str, limit: float = 30) -> Json:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        r = c.get(path)
        assert r.status_code == 200, r.text
        body: Json = r.json()
        if body["state"] != "running":
            return body
        time.sleep(0.2)
    raise AssertionError(f"{path} still running after {limit} s")


def test_info_through_the_coordinator_is_the_agents_with_its_cpu_seconds(site: Site) -> None:
    r = site.c.get(f"/agents/{site.up}/info")
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["name"] == "edge-a"
    assert isinstance(info["cpu_seconds"], float) and info["cpu_seconds"] > 0


def test_iperf3_server_and_run_through_the_coordinator_complete_with_a_result(
    site: Site,
) -> None:
    need_iperf3()
    base = f"/agents/{site.up}/iperf"
    r = site.c.post(f"{base}/servers", json={"address": "127.0.0.1", "timeout": 30})
    assert r.status_code == 201, r.text
    server = r.json()
    assert server["state"] == "listening" and server["port"] > 0
    body = {"host": "127.0.0.1", "port": server["port"], "duration": 1}
    r = site.c.post(f"{base}/runs", json=body)
    assert r.status_code == 202 and r.json()["state"] == "running", r.text
    done = poll(site.c, f"{base}/runs/{r.json()['id']}")
    assert done["state"] == "completed", done["error"]
    assert done["result"]["bits_per_second"] > 0
    r = site.c.get(f"{base}/servers/{server['id']}")
    assert r.status_code == 200 and r.json()["id"] == server["id"]
    r = site.c.delete(f"{base}/servers/{server['id']}")
    assert r.status_code == 200 and r.json()["state"] != "listening", r.text


def test_a_run_with_an_unknown_congestion_control_is_422_with_the_agents_reason(
    site: Site,
) -> None:
    need_iperf3()
    if not congestion_control()[1]:
        pytest.skip("this host does not list its congestion controls: the agent cannot refuse")
    body = {"host": "127.0.0.1", "port": free_port(), "congestion": "nosuchcc"}
    r = site.c.post(f"/agents/{site.up}/iperf/runs", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail.startswith("agent edge-a: congestion control 'nosuchcc' is not available")


def test_a_body_the_agent_refuses_is_422_from_the_agent(site: Site) -> None:
    r = site.c.post(f"/agents/{site.up}/iperf/runs", json={"host": "127.0.0.1", "streams": 0})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail.startswith("agent edge-a: ") and "port: Field required" in detail
    assert "streams: Input should be greater than or equal to 1" in detail


def test_a_run_the_agent_does_not_know_is_404_with_the_agents_reason(site: Site) -> None:
    r = site.c.get(f"/agents/{site.up}/iperf/runs/0123456789ab")
    assert r.status_code == 404, r.text
    assert r.json()["detail"].startswith("agent edge-a: ")


def test_an_unknown_agent_is_404(site: Site) -> None:
    for path in ("/info", "/iperf/runs/0123456789ab"):
        r = site.c.get(f"/agents/no-such-agent{path}")
        assert r.status_code == 404, r.text
        assert r.json()["detail"] == "no agent 'no-such-agent'"


def test_an_agent_that_is_down_is_502_and_the_coordinator_keeps_serving(site: Site) -> None:
    r = site.c.get(f"/agents/{site.down}/info")
    assert r.status_code == 502, r.text
    assert r.json()["detail"].startswith("agent edge-down: no usable answer from http://127.0.0.1:")
    r = site.c.post(f"/agents/{site.down}/iperf/servers", json={"address": "127.0.0.1"})
    assert r.status_code == 502, r.text
    assert site.c.get(f"/agents/{site.up}/info").status_code == 200


def test_an_agent_that_refuses_the_coordinators_token_is_502(site: Site) -> None:
    r = site.c.get(f"/agents/{site.wrong_token}/info")
    assert r.status_code == 502, r.text
    assert "refused the coordinator's token" in r.json()["detail"]
