"""Two coordinators on one PostgreSQL database: one leads, the other stands by and
takes over when the leader is killed mid-transfer, and the transfer completes byte for
byte. The coordinators are real processes (``reservoir server``); the agents are the
paced ones of ``test_server_scheduler.py`` (threads of the test process)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from reservoir.lab.peers import LOCALHOST, free_port, reservoir_command, stop_process

from .test_server_scheduler import USER, Site, agent, events, midway, wait

pytestmark = pytest.mark.integration

LEASE = 2.0  # seconds: a standby leads within LEASE * 4/3 of the leader's end
Json = dict[str, Any]


class Coordinator:
    """``reservoir server`` as a process of its own on ``database_url``."""

    def __init__(self, site: Site, database_url: str, tmp: Path, name: str) -> None:
        self.port = free_port()
        self.url = f"http://{LOCALHOST}:{self.port}"
        self.log = tmp / f"coordinator-{name}.log"
        env = dict(os.environ)
        env.update(
            RESERVOIR_SERVER_USER_TOKENS=f'["{USER}"]',
            RESERVOIR_SERVER_SECRET_KEY_FILE=str(site.key),
            RESERVOIR_SERVER_SCHEDULER_INTERVAL="0.2",
            RESERVOIR_SERVER_LEASE_SECONDS=str(LEASE),
        )
        argv = [*reservoir_command(), "server", "--db", database_url]
        argv += ["--listen", f"{LOCALHOST}:{self.port}"]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)

    def health(self) -> Json | None:
        try:
            r = httpx.get(f"{self.url}/api/v1/health", timeout=2)
        except httpx.HTTPError:
            return None
        return r.json() if r.status_code == 200 else None

    def wait_role(self, role: str, timeout: float) -> Json:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            health = self.health()
            if health is not None and health["role"] == role:
                return health
            time.sleep(0.05)
        raise AssertionError(f"not {role} after {timeout} s: {self.log.read_text()[-2000:]}")

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {USER}"}
        return httpx.Client(base_url=f"{self.url}/api/v1", headers=headers, timeout=30)


@contextmanager
def coordinators(site: Site, database_url: str, tmp: Path) -> Iterator[list[Coordinator]]:
    """Leader a, then standby b; both stopped (by PID) at the end."""
    started: list[Coordinator] = []
    try:
        for name in ("a", "b"):
            started.append(Coordinator(site, database_url, tmp, name))
            started[-1].wait_role("leader" if name == "a" else "standby", timeout=30)
        yield started
    finally:
        for c in started:
            stop_process(c.proc)


@pytest.fixture
def pg_database_url(postgres: Any, tmp_path: Path) -> Iterator[str]:
    name = f"failover{os.getpid()}"
    url: str = postgres.create_database(name)
    yield url
    postgres.drop_database(name)


def test_a_standby_takes_over_a_killed_leader_and_the_transfer_completes(
    tmp_path: Path, pg_database_url: str
) -> None:
    site = Site(tmp_path, pg_database_url)
    with ExitStack() as stack:
        stack.enter_context(agent(site.a))
        stack.enter_context(agent(site.b))
        leader, standby = stack.enter_context(coordinators(site, pg_database_url, tmp_path))
        assert standby.health() == {"status": "ok", "role": "standby", "leader_url": leader.url}
        c = stack.enter_context(standby.client())
        tid = site.register(c)["id"]  # a standby takes writes: the leader's scheduler acts
        link = c.get("/links").json()[0]
        refused = c.post(f"/links/{link['id']}/probe", json={})
        assert refused.status_code == 503, refused.text
        assert refused.json()["code"] == "not_leader" and leader.url in refused.json()["detail"]
        wait(c, tid, midway)
        leader.proc.kill()  # SIGKILL: no lease given back
        killed = time.monotonic()
        leader.proc.wait()
        standby.wait_role("leader", timeout=LEASE * 4 / 3 + 5)
        took_over = time.monotonic() - killed
        done = wait(c, tid, lambda t: t["state"] == "completed")
        history = events(c, tid)
    site.assert_copied()
    print(f"\nfailover: the standby led {took_over:.2f} s after a SIGKILL (lease {LEASE} s)")
    assert took_over <= LEASE * 4 / 3 + 1.0
    assert done["done_bytes"] == done["total_bytes"]
    assert all(leg["summary"]["verified"] for leg in done["legs"])
    assert history.count("coordinator started: following its copies") >= 1
