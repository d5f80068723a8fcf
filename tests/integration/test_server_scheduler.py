"""The coordinator's scheduler end to end on loopback: a real coordinator (uvicorn in a
thread, temporary SQLite), two real agents (in threads, as test_agent_api.py runs them):
agent A holds the source set (2 files), agent B serves the destination set (2 LUN files)
with its builtin target. Transfers complete byte for byte, through a pause and a
resume, and through a coordinator restart (with the source agent restarted meanwhile).

The agents' streams are paced (SO_MAX_PACING_RATE, the caps seam) so a 16 MiB leg takes
a few seconds: long enough to act on it mid-transfer.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from reservoir.agent.control import Agent, AgentSettings
from reservoir.agent.control import make_server as make_agent_server
from reservoir.agent.target import config as tcfg
from reservoir.agent.transfer import CopyOptions, CopySummary, Progress
from reservoir.agent.transfer import copy as engine_copy
from reservoir.lab.peers import free_port
from reservoir.server import ServerSettings
from reservoir.server import make_server as make_coordinator
from reservoir.server.app.core.agent_credentials import AgentCredentials

from .servers import running, start, stop

pytestmark = pytest.mark.integration

MiB = 1 << 20
MEMBER = 16 * MiB
STREAM_RATE = 3 * MiB  # bytes/s per stream: a leg of 2 streams takes ~3 s
USER = "itest-user-token-0123456789abcdef"
IQN = "iqn.2026-11.org.reservoir:itest-b"
Json = dict[str, Any]


async def paced_copy(
    source: str,
    dest: str | Sequence[str],
    options: CopyOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
) -> CopySummary:
    """The real engine, every stream paced to STREAM_RATE."""
    if options.stream_caps is not None:
        dests = 1 if isinstance(dest, str) else len(dest)
        rates = {s: STREAM_RATE for s in range(options.streams * dests)}
        options.stream_caps.want({}, rates)
    return await engine_copy(source, dest, options, progress=progress)


def agent_settings(
    state: Path, port: int, accepted: str, target: Path | None = None, sources: Sequence[Path] = ()
) -> AgentSettings:
    """An agent accepting the token of digest ``accepted``."""
    return AgentSettings(
        name=state.name,
        listen=f"127.0.0.1:{port}",
        tokens=[accepted],  # type: ignore[list-item]
        state_dir=state,
        target_config=target,
        source_volumes=list(sources),
        cwnd_caps="pacing-rate",  # the agent runs in the test process: no cgroup move
    )


@contextmanager
def agent(settings: AgentSettings) -> Iterator[str]:
    server = make_agent_server(settings, Agent(settings, copy_fn=paced_copy))
    with running(server, f"agent-{settings.name}"):
        yield f"http://{settings.host}:{settings.port}"


@contextmanager
def coordinator(site: Site, interval: float = 0.2) -> Iterator[httpx.Client]:
    port = site.port
    settings = ServerSettings(
        database_url=site.database_url,
        secret_key_file=site.key,
        listen=f"127.0.0.1:{port}",
        user_tokens=[USER],  # type: ignore[list-item]
        scheduler_interval=interval,
    )
    with running(make_coordinator(settings), "coordinator"):
        headers = {"Authorization": f"Bearer {USER}"}
        url = f"http://127.0.0.1:{port}/api/v1"
        with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
            yield c


class Site:
    """Files, ports and state folders of the two agents and the coordinator."""

    def __init__(self, tmp: Path, database_url: str | None = None) -> None:
        self.tmp = tmp
        self.sources = [tmp / f"src{i}.img" for i in range(2)]
        for path in self.sources:
            path.write_bytes(os.urandom(MEMBER))
        self.luns = [tmp / f"lun{i}.img" for i in range(2)]
        for path in self.luns:
            with open(path, "wb") as f:
                f.truncate(MEMBER)
        self.portal = free_port()
        config = tcfg.TargetConfig(
            portals=[("127.0.0.1", self.portal)],
            targets=[
                tcfg.Target(
                    iqn=IQN,
                    luns=[tcfg.Lun(i, str(p)) for i, p in enumerate(self.luns)],
                    open=True,
                )
            ],
        )
        self.target = tmp / "target.toml"
        tcfg.save(config, self.target)
        self.database_url = database_url or f"sqlite:///{tmp / 'server.db'}"
        # the coordinator's key: what it derives for agents a and b
        self.key = tmp / "server.key"
        credentials = AgentCredentials.from_file(self.key)
        self.a = agent_settings(
            tmp / "agent-a", free_port(), credentials.control_digest("a"), sources=self.sources
        )
        self.b = agent_settings(
            tmp / "agent-b", free_port(), credentials.control_digest("b"), self.target
        )
        self.port = free_port()

    def agent_bodies(self) -> tuple[Json, Json]:
        """The registrations of agent a (the source files) and b (the LUNs)."""
        lo = [{"name": "lo", "address": "127.0.0.1", "speed_bps": 10**10}]
        files = [
            {"name": f"f{i}", "path": str(p), "size_bytes": MEMBER}
            for i, p in enumerate(self.sources)
        ]
        portal = f"127.0.0.1:{self.portal}"
        luns = [
            {"name": f"l{i}", "iqn": IQN, "lun": i, "size_bytes": MEMBER, "portal": portal}
            for i in range(2)
        ]
        url = "http://127.0.0.1:{}"
        return (
            {"name": "a", "control_url": url.format(self.a.port), "nics": lo, "volumes": files},
            {"name": "b", "control_url": url.format(self.b.port), "nics": lo, "volumes": luns},
        )

    def register(self, c: httpx.Client, **transfer: Any) -> Json:
        """Both agents, their sets (same stripe unit), a link; a transfer of 2 legs
        (``transfer``: more fields of its request)."""
        a, b = (ok(c.post("/agents", json=body)) for body in self.agent_bodies())
        sets = [
            ok(
                c.post(
                    "/volume-sets",
                    json={
                        "name": name,
                        "stripe_unit": MiB,
                        "members": [{"agent_id": x["id"], "volume": f"{v}{i}"} for i in range(2)],
                    },
                )
            )
            for name, x, v in (("src", a, "f"), ("dst", b, "l"))
        ]
        link = ok(
            c.post(
                "/links",
                json={
                    "name": "ab",
                    "agent_a": a["id"],
                    "nic_a": "lo",
                    "agent_b": b["id"],
                    "nic_b": "lo",
                    "capacity_bps": 10**10,
                    "rtt_ms": 0.1,
                },
            )
        )
        return ok(
            c.post(
                "/transfers",
                json={
                    "source": sets[0]["id"],
                    "destination": sets[1]["id"],
                    "streams_per_pair": 2,
                    "paths": [link["id"]],
                    "pacing": {"policy": "off"},
                    "verify": True,
                    **transfer,
                },
            )
        )

    def assert_copied(self) -> None:
        for src, lun in zip(self.sources, self.luns, strict=True):
            assert lun.read_bytes() == src.read_bytes(), f"{lun.name} differs from {src.name}"


def ok(r: httpx.Response) -> Json:
    assert r.status_code in (200, 201), r.text
    data: Json = r.json()
    return data


def wait(c: httpx.Client, tid: str, until: Callable[[Json], bool], timeout: float = 60) -> Json:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t = ok(c.get(f"/transfers/{tid}"))
        if until(t):
            return t
        assert t["state"] not in ("failed", "cancelled"), (t, events(c, tid))
        time.sleep(0.05)
    raise AssertionError(f"transfer {tid}: {t['state']}, {events(c, tid)}")


def events(c: httpx.Client, tid: str) -> list[str]:
    history: list[Json] = c.get(f"/transfers/{tid}/events").json()
    return [e["detail"] for e in history]


def completed(t: Json) -> bool:
    return bool(t["state"] == "completed")


def midway(t: Json) -> bool:
    return bool(t["state"] == "running" and MEMBER // 2 <= t["done_bytes"] < 2 * MEMBER - 4 * MiB)


@pytest.fixture
def site(tmp_path: Path, database_url: str) -> Site:
    return Site(tmp_path, database_url)


def test_a_transfer_of_two_legs_copies_every_member_byte_for_byte(site: Site) -> None:
    with agent(site.a), agent(site.b), coordinator(site) as c:
        t = site.register(c, verification="receipt")
        done = wait(c, t["id"], completed)
    site.assert_copied()
    assert done["done_bytes"] == done["total_bytes"] == 2 * MEMBER
    assert done["created_at"] <= done["started_at"] <= done["completed_at"]  # ISO 8601, UTC
    assert done["rate_bps"] is None and done["eta_seconds"] is None  # not running
    assert done["verification"] == "receipt"
    assert all(leg["summary"]["verified"] for leg in done["legs"])
    assert len({leg["copy_id"] for leg in done["legs"]}) == 2
    for leg in done["legs"]:  # the builtin target kept a receipt of every extent's writes
        summary = leg["summary"]
        assert summary["mode"] == "receipt"
        checked = re.match(r"(\d+) of (\d+) extents checked by the destination's receipts",
                           summary["verification"])  # fmt: skip
        assert checked is not None, summary["verification"]
        assert checked[1] == checked[2] != "0", summary["verification"]


def test_the_end_of_the_copies_reaches_the_transfer_without_a_poll(site: Site) -> None:
    """The scheduler's passes are a minute apart: the transfer starts on the pass its
    creation wakes, and it completes because the coordinator waits on each agent for
    its copy to change state (and its telemetry collector sees the end too)."""
    with agent(site.a), agent(site.b), coordinator(site, interval=60) as c:
        t = site.register(c)
        done = wait(c, t["id"], completed, timeout=30)
    assert all(leg["summary"]["verified"] for leg in done["legs"])
    site.assert_copied()


async def endless_copy(
    source: str,
    dest: str | Sequence[str],
    options: CopyOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
) -> CopySummary:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def test_an_agent_stops_at_once_while_a_coordinator_waits_on_its_copy(site: Site) -> None:
    """A coordinator's wait on a running copy is answered when the agent stops: its
    server waits for every request it is answering before it stops."""
    token = "itest-agent-token-0123456789abcdef"
    settings = agent_settings(site.tmp / "agent-w", free_port(), token, sources=site.sources)
    server = make_agent_server(settings, Agent(settings, copy_fn=endless_copy))
    thread = start(server, "agent-w")
    url = f"http://127.0.0.1:{settings.port}/api/v1/copies"
    auth = {"Authorization": f"Bearer {token}"}
    answers: list[httpx.Response] = []
    try:
        body = {"source": str(site.sources[0]), "dest": str(site.sources[1])}
        copy = ok(httpx.post(url, json=body, headers=auth))
        for _ in range(100):
            if ok(httpx.get(f"{url}/{copy['id']}", headers=auth))["state"] == "running":
                break
            time.sleep(0.05)
        params: dict[str, str | int] = {"while_state": "running", "wait": 60}
        waiting = threading.Thread(
            target=lambda: answers.append(
                httpx.get(f"{url}/{copy['id']}", params=params, headers=auth, timeout=90)
            )
        )
        waiting.start()
        time.sleep(0.3)
        assert waiting.is_alive()  # the copy still runs: no answer yet
    finally:
        stopping = time.monotonic()
        stop(server, thread)
    waiting.join(timeout=10)
    assert time.monotonic() - stopping < 10  # not the minute of the wait
    assert [r.status_code for r in answers] == [200]
    assert answers[0].json()["state"] == "running"  # as it was when the agent stopped


def test_pause_then_resume_mid_transfer_completes_from_the_checkpoints(site: Site) -> None:
    with agent(site.a), agent(site.b), coordinator(site) as c:
        tid = site.register(c)["id"]
        wait(c, tid, midway)
        ok(c.post(f"/transfers/{tid}/pause"))
        paused = wait(c, tid, lambda t: {leg["copy_state"] for leg in t["legs"]} == {"paused"})
        assert paused["state"] == "paused"
        ok(c.post(f"/transfers/{tid}/resume"))
        done = wait(c, tid, completed)
    site.assert_copied()
    assert sum(leg["summary"]["skipped_extents"] for leg in done["legs"]) > 0


def test_a_coordinator_restart_mid_transfer_completes_without_resending(site: Site) -> None:
    with agent(site.b):
        with agent(site.a), coordinator(site) as c:
            tid = site.register(c)["id"]
            wait(c, tid, midway)
            # the coordinator is down; the source agent stops too (its copies pause
            # with their checkpoints) and comes back
        with agent(site.a), coordinator(site) as c:
            done = wait(c, tid, completed)
            history = events(c, tid)
    site.assert_copied()
    legs = done["legs"]
    assert sum(leg["summary"]["skipped_extents"] for leg in legs) > 0
    assert all(leg["summary"]["resent_bytes"] <= 4 * MiB for leg in legs)
    assert any("resumed copy" in e for e in history)


def test_a_destination_agent_restarted_mid_transfer_is_ridden_out_and_its_lapse_said(
    site: Site,
) -> None:
    """The destination agent (its target) stops and starts again while the legs write:
    their sessions log in again, the LUNs are held again, the transfer completes
    verified, and each leg's completed event says when its destination was not held."""
    with agent(site.a), coordinator(site) as c:
        with agent(site.b):
            tid = site.register(c)["id"]
            wait(c, tid, midway)
        time.sleep(1.0)  # the target is down: the legs' sessions retry their logins
        with agent(site.b):
            done = wait(c, tid, completed)
            history = events(c, tid)
    site.assert_copied()
    assert all(leg["summary"]["verified"] for leg in done["legs"])
    lapsed = [leg for leg in done["legs"] if leg["summary"]["hold_lapses"]]
    assert lapsed, [leg["summary"] for leg in done["legs"]]
    said = [e for e in history if " completed (" in e]
    assert len(said) == 2 and all(", verified (storage):" in e for e in said)
    assert any("not held from" in e and "other initiators could write" in e for e in said), said


def test_a_destination_down_longer_than_a_session_recovers_is_waited_for_and_completes(
    site: Site,
) -> None:
    """The destination agent stays down past what its sessions retry (~15 s): each leg's
    copy fails as unreachable, the coordinator resumes it with backoff (once while the
    target is still down: that resume fails too, at its login), and once the agent is
    back the transfer completes verified, without a user's resume."""
    with agent(site.a), coordinator(site) as c:
        with agent(site.b):
            tid = site.register(c)["id"]
            wait(c, tid, midway)
        wait(c, tid, lambda t: any("resuming it in" in e for e in events(c, tid)), timeout=40)
        wait(c, tid, lambda t: any("(retry 1)" in e for e in events(c, tid)), timeout=20)
        time.sleep(1.0)  # that resume fails at its login: nothing listens yet
        with agent(site.b):
            done = wait(c, tid, completed, timeout=90)
            history = events(c, tid)
    site.assert_copied()
    assert all(leg["summary"]["verified"] for leg in done["legs"])
    assert not any("running -> failed" in e for e in history)
    began = [e for e in history if "resuming it in" in e]
    assert began and all("every stream failed" in e or "nothing listens" in e for e in began)
    # the restarted target kept no reservation: the resumed run found the LUN unheld
    said = [e for e in history if " completed (" in e]
    assert len(said) == 2
    assert all("not held between the run before and this one" in e for e in said), said
