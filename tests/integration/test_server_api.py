"""The coordinator on a real uvicorn server in a thread, over a temporary SQLite file;
the agents it registers are one real agent (its source files) under several names."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from reservoir.lab.peers import free_port
from reservoir.server import ServerSettings, make_server
from reservoir.server.app.core.agent_credentials import AgentCredentials
from reservoir.server.app.db import make_engine, upgrade
from reservoir.server.app.tables import Base

from .agents import RunningAgent, key_file, real_agent
from .servers import running

pytestmark = pytest.mark.integration

USER = "itest-user-token-0123456789abcdef"
MiB = 1 << 20
Json = dict[str, Any]


def settings_for(database_url: str, key_dir: Path) -> ServerSettings:
    """The API alone (no scheduler) on ``database_url``, with the key the test agents know
    (agents.key_file) in ``key_dir``."""
    return ServerSettings(
        database_url=database_url,
        listen=f"127.0.0.1:{free_port()}",
        user_tokens=[USER],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        scheduler="off",
        secret_key_file=key_file(key_dir),
    )


@contextmanager
def serve_in_thread(settings: ServerSettings) -> Iterator[str]:
    """The coordinator in a uvicorn server of its own thread; stopped with ``should_exit``."""
    with running(make_server(settings), "server-api"):
        yield f"http://{settings.host}:{settings.port}"


@contextmanager
def client(url: str, token: str | None = USER) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def server_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("server")


@pytest.fixture(scope="module")
def api(server_dir: Path, module_database_url: str) -> Iterator[str]:
    with serve_in_thread(settings_for(module_database_url, server_dir)) as url:
        yield url


@pytest.fixture(scope="module")
def credentials(api: str, server_dir: Path) -> AgentCredentials:
    """What the coordinator derives each agent's tokens from (its key beside its database)."""
    return AgentCredentials.from_file(server_dir / "server.key")


@pytest.fixture(scope="module")
def disks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    """A real agent with source files enough for every registration of this module, on
    both databases."""
    with real_agent(tmp_path_factory.mktemp("disks"), "disks", sources=48) as agent:
        yield agent


def created(r: httpx.Response) -> Json:
    assert r.status_code == 201, r.text
    data: Json = r.json()
    return data


def register(c: httpx.Client, disks: RunningAgent, name: str, size: int = 64 * MiB) -> Json:
    """The real agent under ``name``, with one of its source files as ``vol0``."""
    disks.accept(name)
    body = {
        "name": name,
        "control_url": disks.url,
        "nics": [{"name": "eth1", "address": "10.0.0.1", "speed_bps": 10**10}],
        "volumes": [disks.next_source("vol0", size)],
        "capabilities": ["io_uring"],
    }
    return created(c.post("/agents", json=body))


def build_site_pair(
    c: httpx.Client, disks: RunningAgent, tag: str
) -> tuple[Json, Json, list[Json]]:
    """Two source agents, two destination agents, their sets, and a link per pair."""
    a = [register(c, disks, f"{tag}-a{i}") for i in range(2)]
    b = [register(c, disks, f"{tag}-b{i}") for i in range(2)]
    sets = []
    for side, agents in (("src", a), ("dst", b)):
        members = [{"agent_id": x["id"], "volume": "vol0"} for x in agents]
        body = {"name": f"{tag}-{side}", "members": members, "stripe_unit": MiB}
        sets.append(created(c.post("/volume-sets", json=body)))
    links = []
    for i in range(2):
        body = {
            "name": f"{tag}-l{i}",
            "agent_a": a[i]["id"],
            "nic_a": "eth1",
            "agent_b": b[i]["id"],
            "nic_b": "eth1",
            "capacity_bps": 10**10,
            "rtt_ms": 100.0,
        }
        links.append(created(c.post("/links", json=body)))
    return sets[0], sets[1], links


def new_transfer(c: httpx.Client, disks: RunningAgent, tag: str) -> Json:
    src, dst, links = build_site_pair(c, disks, tag)
    body = {
        "source": src["id"],
        "destination": dst["id"],
        "streams_per_pair": 16,
        "paths": [link["id"] for link in links],
        "pacing": {"policy": "per-socket", "margin": 0.1},
        "equalizer": True,
        "verify": True,
    }
    return created(c.post("/transfers", json=body))


# ---------------------------------------------------------------- auth


def test_health_needs_no_token(api: str) -> None:
    with client(api, token=None) as c:
        assert c.get("/health").json() == {"status": "ok", "role": "leader", "leader_url": api}


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789abcdef", ""])
@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/agents"), ("POST", "/transfers"), ("POST", "/agents/x/heartbeat")],
)
def test_missing_or_wrong_token_is_401(api: str, token: str | None, method: str, path: str) -> None:
    with client(api, token=token) as c:
        r = c.request(method, path, json={})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/agents"), ("POST", "/volume-sets"), ("GET", "/transfers")]
)
def test_agent_token_on_user_endpoints_is_403(
    api: str, credentials: AgentCredentials, disks: RunningAgent, method: str, path: str
) -> None:
    with client(api) as c:
        name = register(c, disks, f"user-ep-{method}-{path.strip('/')}")["name"]
    with client(api, token=credentials.heartbeat_token(name)) as c:
        r = c.request(method, path, json={})
    assert r.status_code == 403
    assert "user's token" in r.json()["detail"]


def test_heartbeat_takes_an_agent_token_only(
    api: str, credentials: AgentCredentials, disks: RunningAgent
) -> None:
    with client(api) as c:
        agent = register(c, disks, "hb-agent")
        assert c.post(f"/agents/{agent['id']}/heartbeat", json={}).status_code == 403
    with client(api, token=credentials.heartbeat_token("hb-agent")) as c:
        r = c.post(f"/agents/{agent['id']}/heartbeat", json={"status": "ok", "version": "0.1.0"})
        assert r.status_code == 200, r.text
        assert r.json()["last_heartbeat_at"] is not None and r.json()["version"] == "0.1.0"
        assert c.post("/agents/ghost/heartbeat", json={}).status_code == 404


def test_no_cors_headers_by_default(api: str) -> None:
    with client(api, token=None) as c:
        r = c.get("/health", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in r.headers


# ---------------------------------------------------------------- validation


def test_bad_requests_are_422_with_field_paths(api: str) -> None:
    with client(api) as c:
        agent = c.post(
            "/agents",
            json={
                "name": "",
                "control_url": "ftp://x",
                "volumes": [{"name": "v", "size_bytes": -1}],
            },
        )
        vset = c.post("/volume-sets", json={"name": "s", "members": [], "stripe_unit": 1000})
        transfer = c.post(
            "/transfers", json={"source": "a", "destination": "b", "streams_per_pair": 0}
        )
        unknown = c.post("/transfers", json={"source": "ghost-a", "destination": "ghost-b"})
    assert {r.status_code for r in (agent, vset, transfer, unknown)} == {422}

    def fields(r: httpx.Response) -> set[tuple[str | int, ...]]:
        return {tuple(e["loc"]) for e in r.json()["errors"]}

    assert {("body", "name"), ("body", "control_url")} <= fields(agent)
    assert ("body", "volumes", 0, "size_bytes") in fields(agent)
    assert {("body", "members"), ("body", "stripe_unit")} <= fields(vset)
    assert ("body", "streams_per_pair") in fields(transfer)
    assert fields(unknown) == {("body", "source")}


# ---------------------------------------------------------------- transfers


def test_transfer_is_queued_with_one_leg_per_server_pair(api: str, disks: RunningAgent) -> None:
    with client(api) as c:
        t = new_transfer(c, disks, "legs")
        fetched = c.get(f"/transfers/{t['id']}").json()
        listed = c.get("/transfers").json()
    assert t["state"] == "queued" and fetched == t and t["id"] in {x["id"] for x in listed}
    assert [(leg["index"], leg["bytes"], leg["streams"]) for leg in t["legs"]] == [
        (0, 64 * MiB, 16),
        (1, 64 * MiB, 16),
    ]
    assert [leg["paths"] for leg in t["legs"]] == [[p] for p in t["paths"]]
    assert t["total_bytes"] == 128 * MiB
    assert t["pacing"] == {"policy": "per-socket", "margin": 0.1}


def test_transfer_walks_its_states_and_records_every_change(api: str, disks: RunningAgent) -> None:
    with client(api) as c:
        t = new_transfer(c, disks, "walk")
        tid = t["id"]
        assert c.post(f"/transfers/{tid}/pause").json()["state"] == "paused"
        refused = c.post(f"/transfers/{tid}/pause")
        assert c.post(f"/transfers/{tid}/resume").json()["state"] == "queued"
        assert c.post(f"/transfers/{tid}/cancel").json()["state"] == "cancelled"
        final = c.post(f"/transfers/{tid}/resume")
        events = c.get(f"/transfers/{tid}/events").json()
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        f"transfer '{tid}': cannot pause a transfer that is paused (only from queued, running)"
    )
    assert final.status_code == 409
    changes = [(e["from_state"], e["to_state"]) for e in events if e["kind"] == "state"]
    assert changes == [
        (None, "queued"),
        ("queued", "paused"),
        ("paused", "queued"),
        ("queued", "cancelled"),
    ]
    assert all(e["at"] and e["detail"] for e in events)
    assert any(e["kind"] == "scheduler" for e in events)


# ---------------------------------------------------------------- persistence and schema


def test_data_survives_a_restart_on_the_same_database(
    tmp_path: Path, database_url: str, disks: RunningAgent
) -> None:
    with serve_in_thread(settings_for(database_url, tmp_path)) as url, client(url) as c:
        t = new_transfer(c, disks, "restart")
        c.post(f"/transfers/{t['id']}/pause")
    with serve_in_thread(settings_for(database_url, tmp_path)) as url, client(url) as c:
        again = c.get(f"/transfers/{t['id']}").json()
        agents = c.get("/agents").json()
        events = c.get(f"/transfers/{t['id']}/events").json()
    assert again["state"] == "paused" and again["legs"] == [
        {**leg, "state": "paused"} for leg in t["legs"]
    ]
    assert len(agents) == 4
    assert [e["to_state"] for e in events if e["kind"] == "state"] == ["queued", "paused"]


def test_migrations_match_the_models(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        upgrade(engine)
        with engine.connect() as conn:
            diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    finally:
        engine.dispose()
    assert diffs == []


def test_secrets_are_never_logged(
    api: str, credentials: AgentCredentials, disks: RunningAgent, caplog: pytest.LogCaptureFixture
) -> None:
    heartbeat = credentials.heartbeat_token("quiet-agent")
    with caplog.at_level("DEBUG"), client(api) as c:
        agent = register(c, disks, "quiet-agent")
        c.get("/agents")
        c.get("/agents", headers={"Authorization": "Bearer wrong-token-0123456789abcdef"})
        beat = {"Authorization": f"Bearer {heartbeat}"}
        assert c.post(f"/agents/{agent['id']}/heartbeat", json={}, headers=beat).status_code == 200
    secrets = (USER, heartbeat, credentials.control_token("quiet-agent"), "wrong-token-0123")
    for secret in secrets:
        assert secret not in caplog.text
