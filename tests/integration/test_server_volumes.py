"""The coordinator registers only volumes an agent has, never one device twice in a set
or a transfer, and never a destination two transfers at once. A real agent (uvicorn in
a thread, with its builtin target: two source files, two LUN files) and a real
coordinator (uvicorn in a thread, temporary SQLite; its scheduler off, so transfers
stay queued: not final, they hold their volumes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reservoir.lab.peers import free_port
from reservoir.server import ServerSettings
from reservoir.server import make_server as make_coordinator

from .agents import API_TOKEN, CREDENTIALS, RunningAgent, key_file, real_agent
from .servers import running

pytestmark = pytest.mark.integration

USER = "itest-user-token-0123456789abcdef"
MiB = 1 << 20
Json = dict[str, Any]


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    with real_agent(tmp_path_factory.mktemp("volumes"), "disk-a", sources=2, luns=2) as a:
        yield a


@pytest.fixture
def c(tmp_path: Path) -> Iterator[httpx.Client]:
    port = free_port()
    settings = ServerSettings(
        database_url=f"sqlite:///{tmp_path / 'server.db'}",
        listen=f"127.0.0.1:{port}",
        user_tokens=[USER],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        scheduler="off",
        secret_key_file=key_file(tmp_path),
    )
    with (
        running(make_coordinator(settings), "coordinator"),
        httpx.Client(
            base_url=f"http://127.0.0.1:{port}/api/v1",
            headers={"Authorization": f"Bearer {USER}"},
            timeout=30,
        ) as client,
    ):
        yield client


def ok(r: httpx.Response, code: int = 201) -> Json:
    assert r.status_code == code, r.text
    data: Json = r.json()
    return data


def messages(r: httpx.Response) -> str:
    problem = r.json()
    errors = problem.get("errors")
    return " ".join(e["msg"] for e in errors) if errors else str(problem["detail"])


def vset(c: httpx.Client, name: str, agent_id: str, *volumes: str) -> httpx.Response:
    members = [{"agent_id": agent_id, "volume": v} for v in volumes]
    return c.post("/volume-sets", json={"name": name, "members": members, "stripe_unit": MiB})


def transfer(c: httpx.Client, source: Json, dest: Json) -> httpx.Response:
    return c.post("/transfers", json={"source": source["id"], "destination": dest["id"]})


# ---------------------------------------------------------------- registration


def test_registering_a_path_the_agent_does_not_have_is_422_and_stores_nothing(
    c: httpx.Client, agent: RunningAgent
) -> None:
    shadow = {"name": "shadow", "path": "/etc/shadow", "size_bytes": 4096}
    r = c.post("/agents", json=agent.registration("disk-a", [agent.source("f0"), shadow]))
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"] == ["body", "volumes", 1]
    assert "'shadow'" in messages(r) and "/etc/shadow" in messages(r)
    assert "does not report" in messages(r)
    assert c.get("/agents").json() == []


def test_registering_a_lun_the_agent_does_not_serve_is_422(
    c: httpx.Client, agent: RunningAgent
) -> None:
    r = c.post("/agents", json=agent.registration("disk-a", [agent.lun("l9", 9)]))
    assert r.status_code == 422, r.text
    assert "'l9'" in messages(r) and f"{agent.iqn} lun 9" in messages(r)


def test_a_volume_larger_than_the_agent_reports_is_422(
    c: httpx.Client, agent: RunningAgent
) -> None:
    big = agent.source("f0", size=agent.size * 2)
    r = c.post("/agents", json=agent.registration("disk-a", [big]))
    assert r.status_code == 422, r.text
    assert f"{agent.size * 2} bytes" in messages(r) and f"{agent.size}" in messages(r)


def test_volumes_the_agent_reports_are_stored_with_their_device_ids(
    c: httpx.Client, agent: RunningAgent
) -> None:
    body = agent.registration("disk-a", [agent.source("f0"), agent.lun("l1", 1)])
    volumes = ok(c.post("/agents", json=body))["volumes"]
    with httpx.Client(headers={"Authorization": f"Bearer {API_TOKEN}"}) as direct:
        reported = {
            v["path"]: v["device_id"] for v in direct.get(f"{agent.url}/api/v1/volumes").json()
        }
    assert [v["device_id"] for v in volumes] == [
        reported[str(agent.sources[0])],
        reported[str(agent.luns[1])],
    ]


def test_an_agent_that_does_not_answer_is_422_without_its_token(c: httpx.Client) -> None:
    body = {
        "name": "ghost",
        "control_url": f"http://127.0.0.1:{free_port()}",
        "volumes": [{"name": "v0", "path": "/srv/v0.img", "size_bytes": MiB}],
    }
    r = c.post("/agents", json=body)
    assert r.status_code == 422, r.text
    assert "could not confirm the volumes of agent 'ghost'" in messages(r)
    assert CREDENTIALS.control_token("ghost") not in r.text
    assert c.get("/agents").json() == []


def test_an_agent_that_refuses_the_token_is_422(c: httpx.Client, agent: RunningAgent) -> None:
    body = agent.registration("not-its-name", [agent.source("f0")], trusted=False)
    r = c.post("/agents", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"] == ["body", "name"]
    assert CREDENTIALS.control_token("not-its-name") not in r.text


# ---------------------------------------------------------------- volume sets


def test_a_volume_set_with_one_lun_under_two_portals_is_422_naming_both(
    c: httpx.Client, agent: RunningAgent
) -> None:
    port = agent.portal.rpartition(":")[2]
    volumes = [agent.lun("l0", 0), agent.lun("l0-again", 0, portal=f"localhost:{port}")]
    a = ok(c.post("/agents", json=agent.registration("disk-a", volumes)))
    r = vset(c, "twice", a["id"], "l0", "l0-again")
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"] == ["body", "members", 1]
    assert "agent 'disk-a' volume 'l0'" in messages(r)
    assert "agent 'disk-a' volume 'l0-again'" in messages(r)
    assert "one device" in messages(r)
    assert c.get("/volume-sets").json() == []


def test_a_volume_set_with_a_lun_and_its_backing_file_is_422(
    c: httpx.Client, agent: RunningAgent
) -> None:
    backing = {"name": "file0", "path": str(agent.luns[0]), "size_bytes": agent.size}
    a = ok(c.post("/agents", json=agent.registration("disk-a", [backing, agent.lun("l0", 0)])))
    r = vset(c, "twice", a["id"], "file0", "l0")
    assert r.status_code == 422, r.text
    assert "volume 'file0'" in messages(r) and "volume 'l0'" in messages(r)


# ---------------------------------------------------------------- transfers


@pytest.fixture
def sets(c: httpx.Client, agent: RunningAgent) -> dict[str, Json]:
    """Sets of one member each: s0, s1 (the source files), l0, l1 (the LUNs), b1 (the
    file backing LUN 1)."""
    backing = {"name": "b1", "path": str(agent.luns[1]), "size_bytes": agent.size}
    volumes = [agent.source("s0", 0), agent.source("s1", 1), agent.lun("l0", 0)]
    volumes += [agent.lun("l1", 1), backing]
    a = ok(c.post("/agents", json=agent.registration("disk-a", volumes)))
    return {v: ok(vset(c, v, a["id"], v)) for v in ("s0", "s1", "l0", "l1", "b1")}


def test_a_transfer_into_the_destination_of_a_queued_transfer_is_409_naming_it(
    c: httpx.Client, sets: dict[str, Json]
) -> None:
    first = ok(transfer(c, sets["s0"], sets["l0"]))
    r = transfer(c, sets["s1"], sets["l0"])
    assert r.status_code == 409, r.text
    assert first["id"] in messages(r) and "queued" in messages(r)
    assert len(c.get("/transfers").json()) == 1
    ok(c.post(f"/transfers/{first['id']}/cancel"), 200)  # final: the destination is free
    ok(transfer(c, sets["s1"], sets["l0"]))


def test_a_transfer_into_the_source_of_an_unfinished_transfer_is_409(
    c: httpx.Client, sets: dict[str, Json]
) -> None:
    first = ok(transfer(c, sets["s0"], sets["l0"]))
    ok(c.post(f"/transfers/{first['id']}/pause"), 200)
    r = transfer(c, sets["s1"], sets["s0"])
    assert r.status_code == 409, r.text
    assert first["id"] in messages(r) and "source" in messages(r) and "paused" in messages(r)


def test_a_transfer_whose_source_file_backs_its_destination_lun_is_422(
    c: httpx.Client, sets: dict[str, Json]
) -> None:
    r = transfer(c, sets["b1"], sets["l1"])
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"] == ["body", "destination"]
    assert "agent 'disk-a' volume 'b1'" in messages(r)
    assert "agent 'disk-a' volume 'l1'" in messages(r)
    assert c.get("/transfers").json() == []
