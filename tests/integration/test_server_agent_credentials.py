"""Each agent's own credentials, derived by the coordinator from a key kept outside its
database: a real coordinator (uvicorn in a thread, its configuration file as an operator
writes it), the operator's ``reservoir server agent-credentials`` in a child process,
and real agents configured with what it prints."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from reservoir.agent.control import Agent
from reservoir.agent.control import load_settings as load_agent_settings
from reservoir.agent.control import make_server as make_agent_server
from reservoir.agent.target import config as tcfg
from reservoir.lab.peers import free_port
from reservoir.server import make_server
from reservoir.server.app.core.config import load_settings

from .servers import running

pytestmark = pytest.mark.integration

USER = "itest-user-token-0123456789abcdef"
MiB = 1 << 20
MEMBER = 4 * MiB
IQN = "iqn.2026-11.org.reservoir:itest-creds"
ROOT = Path(__file__).resolve().parents[2]
Json = dict[str, Any]


@dataclass(frozen=True)
class Printed:
    """What ``agent-credentials`` prints: the ``tokens`` line and the heartbeat token."""

    tokens_line: str
    heartbeat_token: str

    @property
    def digest(self) -> str:
        digests: list[str] = tomllib.loads(self.tokens_line)["tokens"]
        assert len(digests) == 1
        return digests[0]


def write_config(tmp: Path, *, scheduler: str = "agents", extra: str = "") -> Path:
    """The coordinator's file: its database in a folder it creates (state/)."""
    path = tmp / "server.toml"
    path.write_text(
        "[server]\n"
        f'database_url = "sqlite:///{tmp / "state" / "server.db"}"\n'
        f'listen = "127.0.0.1:{free_port()}"\n'
        f'user_tokens = ["{USER}"]\n'
        f'scheduler = "{scheduler}"\n'
        "scheduler_interval = 0.2\n" + extra
    )
    return path


def agent_credentials(config: Path, name: str, generation: int = 0) -> Printed:
    argv = [sys.executable, "-m", "reservoir", "server", "agent-credentials", name]
    argv += ["--generation", str(generation)]
    done = subprocess.run(
        [*argv, "--config", str(config)],
        cwd=ROOT,  # this tree's reservoir
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in done.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    (tokens_line,) = [ln for ln in lines if ln.startswith("tokens = ")]
    return Printed(tokens_line, lines[-1].strip())


@contextmanager
def coordinator(config: Path) -> Iterator[str]:
    settings = load_settings(config)
    with running(make_server(settings), "coordinator"):
        yield f"http://{settings.host}:{settings.port}/api/v1"


@contextmanager
def client(url: str, token: str = USER) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
        yield c


def ok(r: httpx.Response) -> Json:
    assert r.status_code in (200, 201), r.text
    data: Json = r.json()
    return data


def register_unreached(c: httpx.Client, name: str) -> Json:
    """An agent whose control API is not called (the scheduler has nothing to run)."""
    body = {"name": name, "control_url": "http://127.0.0.1:9", "volumes": []}
    return ok(c.post("/agents", json=body))


def test_an_agents_heartbeat_token_cannot_heartbeat_as_another_agent(tmp_path: Path) -> None:
    config = write_config(tmp_path, scheduler="off")
    with coordinator(config) as url:
        with client(url) as c:
            a, b = register_unreached(c, "a"), register_unreached(c, "b")
        as_a = agent_credentials(config, "a").heartbeat_token
        with client(url, as_a) as c:
            refused = c.post(f"/agents/{b['id']}/heartbeat", json={"version": "9"})
            assert refused.status_code == 403, refused.text
            assert "own" in refused.json()["detail"]
            own = ok(c.post(f"/agents/{a['id']}/heartbeat", json={"version": "9"}))
        assert own["last_heartbeat_at"] is not None
        with client(url) as c:
            assert ok(c.get(f"/agents/{b['id']}"))["last_heartbeat_at"] is None


def test_a_forged_heartbeat_token_is_401(tmp_path: Path) -> None:
    config = write_config(tmp_path, scheduler="off")
    (tmp_path / "elsewhere").mkdir()
    other = write_config(tmp_path / "elsewhere", scheduler="off")
    with coordinator(config) as url:
        with client(url) as c:
            a = register_unreached(c, "a")
        # the same name's token from another coordinator (another key)
        forged = agent_credentials(other, "a").heartbeat_token
        with client(url, forged) as c:
            r = c.post(f"/agents/{a['id']}/heartbeat", json={})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"


def test_the_database_is_created_0600_in_a_0700_folder(tmp_path: Path) -> None:
    config = write_config(tmp_path, scheduler="off")
    with coordinator(config) as url, client(url) as c:
        register_unreached(c, "a")
    state = tmp_path / "state"
    assert state.stat().st_mode & 0o777 == 0o700
    assert (state / "server.db").stat().st_mode & 0o777 == 0o600
    for path in state.iterdir():  # the key, and any journal SQLite left
        assert path.stat().st_mode & 0o077 == 0, f"{path.name} is open to others"


def test_the_database_holds_no_agent_token(tmp_path: Path) -> None:
    config = write_config(tmp_path, scheduler="off")
    with coordinator(config) as url:
        with client(url) as c:
            agents = [register_unreached(c, name) for name in ("a", "b")]
        printed = {x["name"]: agent_credentials(config, x["name"]) for x in agents}
        for x in agents:
            with client(url, printed[x["name"]].heartbeat_token) as c:
                ok(c.post(f"/agents/{x['id']}/heartbeat", json={}))
    raw = b"".join(p.read_bytes() for p in (tmp_path / "state").glob("server.db*"))
    for p in printed.values():
        control_digest = p.digest.removeprefix("sha256:")
        for secret in (p.heartbeat_token, control_digest, USER):
            assert secret.encode() not in raw
    assert b"sha256:" not in raw and b"token" not in raw.lower()


def test_registering_an_agent_with_an_api_token_is_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path, scheduler="off")
    body = {"name": "a", "control_url": "http://127.0.0.1:9", "api_token": "x" * 24}
    with coordinator(config) as url, client(url) as c:
        r = c.post("/agents", json=body)
        assert r.status_code == 422
        assert "reservoir server agent-credentials" in r.text
        assert "x" * 24 not in r.text
        assert c.get("/agents").json() == []


# ---------------------------------------------------------------- the operator's flow


def write_agent_config(
    tmp: Path,
    name: str,
    printed: Printed,
    target: Path | None,
    sources: tuple[Path, ...] = (),
    *,
    extra: tuple[str, ...] = (),
) -> Path:
    """The agent's file as the operator writes it from ``agent-credentials``, with the
    files ``sources`` as its source volumes."""
    home = tmp / name
    home.mkdir()
    token_file = home / "coordinator.token"
    token_file.write_text(printed.heartbeat_token + "\n")
    token_file.chmod(0o600)
    lines = [
        "[agent]",
        f'name = "{name}"',
        f'listen = "127.0.0.1:{free_port()}"',
        printed.tokens_line,
        f'coordinator_token_file = "{token_file}"',
        'state_dir = "state"',
        'cwnd_caps = "pacing-rate"',  # the agent runs in the test process: no cgroup move
        *extra,
    ]
    if target is not None:
        lines.append(f'target_config = "{target}"')
    if sources:
        lines.append("source_volumes = [" + ", ".join(f'"{p}"' for p in sources) + "]")
    path = home / "agent.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@contextmanager
def agent(config: Path) -> Iterator[str]:
    settings = load_agent_settings(config)
    with running(make_agent_server(settings, Agent(settings)), f"agent-{settings.name}"):
        yield f"http://{settings.host}:{settings.port}"


def target_of(tmp: Path, lun: Path) -> tuple[Path, int]:
    portal = free_port()
    conf = tcfg.TargetConfig(
        portals=[("127.0.0.1", portal)],
        targets=[tcfg.Target(iqn=IQN, luns=[tcfg.Lun(0, str(lun))], open=True)],
    )
    path = tmp / "target.toml"
    tcfg.save(conf, path)
    return path, portal


def register_pair(c: httpx.Client, urls: dict[str, str], source: Path, portal: int) -> Json:
    """Agent a with the source file, agent b serving the LUN; a transfer of a to b."""
    lo = [{"name": "lo", "address": "127.0.0.1", "speed_bps": 10**10}]
    volume_a = {"name": "f0", "path": str(source), "size_bytes": MEMBER}
    volume_b = {
        "name": "l0",
        "iqn": IQN,
        "lun": 0,
        "size_bytes": MEMBER,
        "portal": f"127.0.0.1:{portal}",
    }
    ids = {}
    for name, volume in (("a", volume_a), ("b", volume_b)):
        body = {"name": name, "control_url": urls[name], "nics": lo, "volumes": [volume]}
        ids[name] = ok(c.post("/agents", json=body))["id"]
    sets = [
        ok(
            c.post(
                "/volume-sets",
                json={"name": f"set-{n}", "members": [{"agent_id": ids[n], "volume": v}]},
            )
        )["id"]
        for n, v in (("a", "f0"), ("b", "l0"))
    ]
    transfer = {"source": sets[0], "destination": sets[1], "streams_per_pair": 2, "verify": True}
    return ok(c.post("/transfers", json=transfer))


def wait_completed(c: httpx.Client, tid: str, timeout: float = 60) -> Json:
    deadline = time.monotonic() + timeout
    while True:
        t = ok(c.get(f"/transfers/{tid}"))
        if t["state"] == "completed":
            return t
        assert t["state"] not in ("failed", "cancelled"), c.get(f"/transfers/{tid}/events").text
        assert time.monotonic() < deadline, f"transfer {tid} still {t['state']}"
        time.sleep(0.1)


def test_agents_configured_with_the_printed_credentials_run_the_coordinators_copy(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path)
    source = tmp_path / "source.img"
    source.write_bytes(os.urandom(MEMBER))
    lun = tmp_path / "lun.img"
    with open(lun, "wb") as f:
        f.truncate(MEMBER)
    target, portal = target_of(tmp_path, lun)
    printed = {name: agent_credentials(config, name) for name in ("a", "b")}
    config_a = write_agent_config(tmp_path, "a", printed["a"], None, (source,))
    config_b = write_agent_config(tmp_path, "b", printed["b"], target)
    with agent(config_a) as url_a, agent(config_b) as url_b, coordinator(config) as url:
        with client(url) as c:
            t = register_pair(c, {"a": url_a, "b": url_b}, source, portal)
            done = wait_completed(c, t["id"])
        with client(url, printed["a"].heartbeat_token) as c:
            ok(c.post(f"/agents/{done['legs'][0]['source_agent']}/heartbeat", json={}))
        # the heartbeat token goes one way: the agent does not take it as a control token
        with client(f"{url_a}/api/v1", printed["a"].heartbeat_token) as c:
            assert c.get("/copies").status_code == 401
    assert lun.read_bytes() == source.read_bytes()
    assert all(leg["summary"]["verified"] for leg in done["legs"])


def _status(url: str, agent_id: str) -> Json:
    with client(url) as c:
        return ok(c.get(f"/agents/{agent_id}"))


def _until_status(url: str, agent_id: str, wanted: str, timeout: float = 10.0) -> Json:
    deadline = time.monotonic() + timeout
    while (shown := _status(url, agent_id))["status"] != wanted:
        assert time.monotonic() < deadline, f"agent still {shown['status']}, not {wanted}"
        time.sleep(0.1)
    return shown


def test_an_agent_sends_heartbeats_and_is_shown_unreachable_when_they_stop(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, extra="agent_unreachable_after = 2.0\n")
    printed = agent_credentials(config, "a")
    with coordinator(config) as url:
        with client(url) as c:
            registered = register_unreached(c, "a")
        assert registered["status"] == "registered" and registered["last_heartbeat_at"] is None
        base = url.removesuffix("/api/v1")
        extra = (f'coordinator = "{base}"', "heartbeat_interval = 1.0")
        with agent(write_agent_config(tmp_path, "a", printed, None, extra=extra)):
            alive = _until_status(url, registered["id"], "ok")
        assert alive["last_heartbeat_at"] is not None and alive["version"]
        gone = _until_status(url, registered["id"], "unreachable")  # stopped: 2 s later
        assert gone["last_heartbeat_at"] >= alive["last_heartbeat_at"]  # ISO 8601, UTC


def test_a_heartbeat_without_an_id_takes_only_an_agents_own_token(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    printed = agent_credentials(config, "a")
    with coordinator(config) as url:
        with client(url) as c:
            register_unreached(c, "a")
            assert c.post("/agents/heartbeat", json={}).status_code == 403  # a user's token
        with client(url, printed.heartbeat_token) as c:
            assert ok(c.post("/agents/heartbeat", json={"version": "9.9"}))["name"] == "a"
        with client(url, "forged-heartbeat-token-0123456789") as c:
            assert c.post("/agents/heartbeat", json={}).status_code == 401


def test_rotating_an_agents_tokens_keeps_it_with_everything_that_uses_it(
    tmp_path: Path,
) -> None:
    """The operator gives the agent its next digest beside the old one, rotates, and the
    coordinator presents the new token and takes only the new heartbeat token; an agent
    left with the old digest refuses the coordinator from then on."""
    config = write_config(tmp_path, scheduler="off")
    old, new = agent_credentials(config, "a"), agent_credentials(config, "a", generation=1)
    assert old.digest != new.digest and old.heartbeat_token != new.heartbeat_token
    both = Printed(f'tokens = ["{old.digest}", "{new.digest}"]', old.heartbeat_token)
    stale = Printed(agent_credentials(config, "b").tokens_line, "unused-heartbeat-token")
    with (
        coordinator(config) as url,
        agent(write_agent_config(tmp_path, "a", both, None)) as url_a,
        agent(write_agent_config(tmp_path, "b", stale, None)) as url_b,
        client(url) as c,
    ):
        ids = {
            name: ok(c.post("/agents", json={"name": name, "control_url": u, "volumes": []}))["id"]
            for name, u in (("a", url_a), ("b", url_b))
        }
        for agent_id in ids.values():
            assert ok(c.get(f"/agents/{agent_id}/info"))["version"]  # generation 0 taken
            rotated = ok(c.patch(f"/agents/{agent_id}", json={"rotate_tokens": True}))
            assert rotated["token_generation"] == 1 and rotated["id"] == agent_id
        assert ok(c.get(f"/agents/{ids['a']}/info"))["name"] == "a"  # generation 1 taken
        refused = c.get(f"/agents/{ids['b']}/info")
        assert refused.status_code == 502 and refused.json()["code"] == "agent_token_refused"
        with client(url, old.heartbeat_token) as h:
            assert h.post("/agents/heartbeat", json={}).status_code == 401
        with client(url, new.heartbeat_token) as h:
            assert ok(h.post("/agents/heartbeat", json={}))["name"] == "a"
