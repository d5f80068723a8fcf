"""The coordinator's routes over an in-process ASGI client: registry rules and transfers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fake_volumes import FakeVolumes
from fastapi import FastAPI
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from reservoir.server import ServerSettings, create_app
from reservoir.server.app import db
from reservoir.server.domain import telemetry

USER = "unit-user-token-0123456789abcdef"
MiB = 1 << 20
Json = dict[str, Any]


class InProcess(httpx.BaseTransport):
    """A synchronous transport into the ASGI app: one short event loop per request."""

    def __init__(self, app: FastAPI) -> None:
        self.asgi = httpx.ASGITransport(app=app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def send() -> httpx.Response:
            response = await self.asgi.handle_async_request(request)
            body = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers, content=body)

        request.read()
        return asyncio.run(send())


class Api(httpx.Client):
    """A client of the app in process, and the agents the app asks for their volumes."""

    def __init__(self, app: FastAPI, agents: FakeVolumes, engine: Engine) -> None:
        headers = {"Authorization": f"Bearer {USER}"}
        super().__init__(transport=InProcess(app), base_url="http://server/api/v1", headers=headers)
        self.agents = agents
        self.engine = engine  # the app's database, for what only agents would write


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    """The app in process on a fresh database (SQLite, PostgreSQL) migrated to head (as
    the lifespan does); the agents it registers are fakes of their ``GET /volumes``."""
    settings = ServerSettings(
        database_url=database_url,
        user_tokens=[USER],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        scheduler="off",  # the API alone: the agents registered here do not exist
    )
    engine = db.make_engine(settings.database_url)
    db.upgrade(engine)
    agents = FakeVolumes()
    with Api(create_app(settings, engine=engine, volume_lister=agents), agents, engine) as c:
        yield c
    engine.dispose()


def ok(response: httpx.Response, code: int = 201) -> Json:
    assert response.status_code == code, response.text
    data: Json = response.json()
    return data


def agent(c: Api, name: str, volumes: int = 1, size: int = 64 * MiB) -> Json:
    """An agent (a fake, on a host of its own) with ``volumes`` files it reports."""
    body = {
        "name": name,
        "control_url": "http://127.0.0.1:8740",
        "nics": [{"name": "eth0", "address": "10.0.0.1", "speed_bps": 10**10}],
        "volumes": [
            {"name": f"v{i}", "path": f"/v{i}", "size_bytes": size} for i in range(volumes)
        ],
    }
    return ok(c.post("/agents", json=c.agents.has(body)))


def volume_set(c: Api, name: str, agents: list[Json], unit: int = MiB) -> Json:
    members = [{"agent_id": a["id"], "volume": "v0"} for a in agents]
    body = {"name": name, "members": members, "stripe_unit": unit}
    return ok(c.post("/volume-sets", json=body))


def link(c: Api, name: str, a: Json, b: Json) -> Json:
    body = {
        "name": name,
        "agent_a": a["id"],
        "nic_a": "eth0",
        "agent_b": b["id"],
        "nic_b": "eth0",
        "capacity_bps": 10**10,
        "rtt_ms": 100,
    }
    return ok(c.post("/links", json=body))


def test_an_api_token_at_registration_is_refused_and_not_echoed(api: httpx.Client) -> None:
    body = {"name": "a1", "control_url": "http://h:1", "api_token": "agent-api-token-0123"}
    r = api.post("/agents", json=body)
    assert r.status_code == 422
    assert "reservoir server agent-credentials" in r.text
    assert "agent-api-token-0123" not in r.text
    assert api.get("/agents").json() == []


def test_duplicate_agent_name_is_409(api: Api) -> None:
    agent(api, "a1")
    r = api.post("/agents", json={"name": "a1", "control_url": "http://h:1"})
    assert r.status_code == 409
    assert r.json()["detail"] == "an agent named 'a1' is registered already"


def test_unknown_ids_are_404_naming_the_id(api: Api) -> None:
    for path, kind in [
        ("/agents/nope", "agent"),
        ("/volume-sets/nope", "volume set"),
        ("/links/nope", "link"),
        ("/transfers/nope", "transfer"),
        ("/transfers/nope/events", "transfer"),
    ]:
        r = api.get(path)
        assert r.status_code == 404 and r.json()["detail"] == f"no {kind} 'nope'"
    r = api.post("/transfers/nope/pause")
    assert r.status_code == 404


def test_a_speed_beyond_any_nic_is_422_not_a_database_overflow(api: Api) -> None:
    body = {
        "name": "a1",
        "control_url": "http://127.0.0.1:8740",
        "nics": [
            {"name": "eth0", "address": "10.0.0.1", "speed_bps": 4719950295536288820031913984}
        ],
    }
    r = api.post("/agents", json=body)
    assert r.status_code == 422
    assert r.json()["errors"][0]["loc"] == ["body", "nics", 0, "speed_bps"]
    assert api.get("/agents").json() == []


def test_volume_set_with_unknown_agent_is_422_at_the_member(api: Api) -> None:
    a1 = agent(api, "a1")
    members = [{"agent_id": a1["id"], "volume": "v0"}, {"agent_id": "ghost", "volume": "v0"}]
    r = api.post("/volume-sets", json={"name": "s", "members": members})
    assert r.status_code == 422
    assert r.json()["errors"][0]["loc"] == ["body", "members", 1, "agent_id"]


def test_link_to_a_missing_nic_is_422_at_the_nic(api: Api) -> None:
    a1, b1 = agent(api, "a1"), agent(api, "b1")
    body = {
        "name": "l",
        "agent_a": a1["id"],
        "nic_a": "eth0",
        "agent_b": b1["id"],
        "nic_b": "eth9",
        "capacity_bps": 1,
        "rtt_ms": 1,
    }
    r = api.post("/links", json=body)
    assert r.status_code == 422
    assert r.json()["errors"][0] == {
        "loc": ["body", "nic_b"],
        "msg": "agent 'b1' has no NIC 'eth9'",
        "type": "value_error",
    }


def test_transfer_to_a_smaller_destination_is_422(api: Api) -> None:
    a1, b1 = agent(api, "a1"), agent(api, "b1", size=32 * MiB)
    src, dst = volume_set(api, "src", [a1]), volume_set(api, "dst", [b1])
    r = api.post("/transfers", json={"source": src["id"], "destination": dst["id"]})
    assert r.status_code == 422
    detail = r.json()["errors"][0]
    assert detail["loc"] == ["body", "destination"]
    assert detail["msg"] == f"the destination holds {32 * MiB} bytes, the source needs {64 * MiB}"


def test_transfer_paths_must_join_each_legs_agents(api: Api) -> None:
    a1, a2, b1, b2 = [agent(api, n) for n in ("a1", "a2", "b1", "b2")]
    src = volume_set(api, "src", [a1, a2])
    dst = volume_set(api, "dst", [b1, b2])
    only_a1_b1 = link(api, "l1", a1, b1)
    body = {"source": src["id"], "destination": dst["id"], "paths": [only_a1_b1["id"]]}
    r = api.post("/transfers", json=body)
    assert r.status_code == 422
    assert r.json()["errors"][0]["loc"] == ["body", "paths"]
    assert "agent 'a2' and agent 'b2'" in r.json()["errors"][0]["msg"]
    r = api.post("/transfers", json={**body, "paths": ["ghost"]})
    assert r.json()["errors"][0]["loc"] == ["body", "paths", 0]


def test_two_sources_to_four_destinations_deal_round_robin(api: Api) -> None:
    a = [agent(api, f"a{i}") for i in range(2)]
    b = [agent(api, f"b{i}", size=32 * MiB) for i in range(4)]
    src, dst = volume_set(api, "src", a), volume_set(api, "dst", b)
    t = ok(api.post("/transfers", json={"source": src["id"], "destination": dst["id"]}))
    got = {(leg["source_agent"], leg["dest_agent"]) for leg in t["legs"]}
    assert got == {(a[j % 2]["id"], b[j]["id"]) for j in range(4)}
    assert t["total_bytes"] == 128 * MiB == sum(leg["bytes"] for leg in t["legs"])


def test_things_in_use_cannot_be_deleted(api: Api) -> None:
    a1, b1 = agent(api, "a1"), agent(api, "b1")
    src, dst = volume_set(api, "src", [a1]), volume_set(api, "dst", [b1])
    l1 = link(api, "l1", a1, b1)
    body = {"source": src["id"], "destination": dst["id"], "paths": [l1["id"]]}
    ok(api.post("/transfers", json=body))
    for path in (f"/agents/{a1['id']}", f"/volume-sets/{src['id']}", f"/links/{l1['id']}"):
        r = api.delete(path)
        assert r.status_code == 409, path
    other = agent(api, "lonely")
    assert (api.delete(f"/agents/{other['id']}")).status_code == 204
    assert (api.get(f"/agents/{other['id']}")).status_code == 404


def test_cancelled_transfer_refuses_resume_with_409(api: Api) -> None:
    a1, b1 = agent(api, "a1"), agent(api, "b1")
    src, dst = volume_set(api, "src", [a1]), volume_set(api, "dst", [b1])
    t = ok(api.post("/transfers", json={"source": src["id"], "destination": dst["id"]}))
    cancelled = ok(api.post(f"/transfers/{t['id']}/cancel"), 200)
    assert {leg["state"] for leg in cancelled["legs"]} == {"cancelled"}
    r = api.post(f"/transfers/{t['id']}/resume")
    assert r.status_code == 409
    reason = "cannot resume a transfer that is cancelled (only from paused, failed)"
    assert r.json()["detail"] == f"transfer '{t['id']}': {reason}"


def test_openapi_documents_every_route_with_a_summary(api: Api) -> None:
    spec = ok(api.get("/openapi.json"), 200)
    operations = [op for path in spec["paths"].values() for op in path.values()]
    assert len(operations) >= 17
    assert all(op.get("summary") for op in operations)
    for name in ("AgentCreate", "VolumeSetCreate", "LinkCreate", "TransferCreate"):
        assert spec["components"]["schemas"][name]["examples"], name
    assert "HTTPBearer" in spec["components"]["securitySchemes"]


def test_openapi_names_each_operation_after_its_route_once(api: Api) -> None:
    spec = ok(api.get("/openapi.json"), 200)
    ids = [op["operationId"] for path in spec["paths"].values() for op in path.values()]
    assert len(ids) == len(set(ids))
    assert spec["paths"]["/api/v1/transfers"]["post"]["operationId"] == "create_transfer"
    assert spec["paths"]["/api/v1/transfers"]["get"]["operationId"] == "list_transfers"
    assert all(i.isidentifier() and "api_v1" not in i for i in ids)


def test_openapi_offers_the_verification_modes_on_transfers(api: Api) -> None:
    schemas = ok(api.get("/openapi.json"), 200)["components"]["schemas"]
    for name in ("TransferCreate", "TransferPublic"):
        field = schemas[name]["properties"]["verification"]
        assert (field["enum"], field["default"]) == (["storage", "receipt"], "storage"), name


def body_of(name: str, *volumes: Json) -> Json:
    return {
        "name": name,
        "control_url": f"http://{name}.test:8740",
        "volumes": list(volumes),
    }


def test_an_agent_is_asked_for_its_volumes_and_they_are_stored_with_its_device_ids(
    api: Api,
) -> None:
    body = body_of("a1", {"name": "v0", "path": "/dev/vdb", "size_bytes": MiB})
    api.agents.has(body)
    created = ok(api.post("/agents", json=body))
    assert (
        created["volumes"][0]["device_id"]
        == api.agents.by_url["http://a1.test:8740"][0]["device_id"]
    )
    assert api.agents.asked == ["http://a1.test:8740"]


def test_an_agent_without_volumes_is_not_asked(api: Api) -> None:
    ok(api.post("/agents", json=body_of("a1")))
    assert api.agents.asked == []


def test_a_volume_the_agent_does_not_report_is_422_and_nothing_is_stored(api: Api) -> None:
    body = body_of("a1", {"name": "v0", "path": "/dev/vdb", "size_bytes": MiB})
    api.agents.has(body)
    shadow = {"name": "shadow", "path": "/etc/shadow", "size_bytes": 4096}
    r = api.post("/agents", json={**body, "volumes": [*body["volumes"], shadow]})
    assert r.status_code == 422
    assert r.json()["errors"] == [
        {
            "loc": ["body", "volumes", 1],
            "msg": "agent 'a1' does not report volume 'shadow' (/etc/shadow) among its "
            "volumes (the LUNs of its target and its source_volumes)",
            "type": "value_error",
        }
    ]
    assert api.get("/agents").json() == []


def test_a_volume_the_agent_reports_missing_is_422_with_its_reason(api: Api) -> None:
    body = body_of("a1", {"name": "v0", "path": "/dev/vdb", "size_bytes": MiB})
    api.agents.has(body)
    entry = api.agents.by_url["http://a1.test:8740"][0]
    entry.update(device_id=None, size_bytes=None, error="/dev/vdb does not exist")
    r = api.post("/agents", json=body)
    assert r.status_code == 422
    msg = r.json()["errors"][0]["msg"]
    assert msg == "agent 'a1' cannot use volume 'v0' (/dev/vdb): /dev/vdb does not exist"


def test_a_volume_declared_larger_than_the_agent_reports_is_422(api: Api) -> None:
    body = body_of("a1", {"name": "v0", "path": "/dev/vdb", "size_bytes": MiB})
    api.agents.has(body)
    r = api.post(
        "/agents", json={**body, "volumes": [{**body["volumes"][0], "size_bytes": 2 * MiB}]}
    )
    assert r.status_code == 422
    assert r.json()["errors"][0]["msg"] == (
        f"volume 'v0' (/dev/vdb) is declared with {2 * MiB} bytes; agent 'a1' has {MiB}"
    )


def test_an_agent_that_cannot_be_asked_is_422_with_the_reason_and_never_the_token(
    api: Api,
) -> None:
    body = body_of("a1", {"name": "v0", "path": "/dev/vdb", "size_bytes": MiB})
    r = api.post("/agents", json=body)  # nobody answers at its URL
    assert r.status_code == 422
    assert r.json()["errors"][0]["loc"] == ["body", "control_url"]
    assert r.json()["errors"][0]["msg"] == (
        "could not confirm the volumes of agent 'a1' at http://a1.test:8740/: connection refused"
    )
    api.agents.has(body, refuses=True)
    r = api.post("/agents", json=body)
    assert r.status_code == 422
    assert r.json()["errors"][0]["loc"] == ["body", "name"]
    assert "refused the coordinator's token for 'a1' (401: the token is not valid)" in r.text
    assert "reservoir server agent-credentials a1" in r.text
    assert api.get("/agents").json() == []


def test_a_volume_set_of_one_device_under_two_names_is_422_naming_both_members(
    api: Api,
) -> None:
    iqn = "iqn.2026-11.org.reservoir:a1"
    lun = {"name": "l0", "iqn": iqn, "lun": 0, "size_bytes": MiB, "portal": "10.0.0.1:3260"}
    body = body_of("a1", lun, {**lun, "name": "l0-other-portal", "portal": "a1.test:3260"})
    a1 = ok(api.post("/agents", json=api.agents.has(body)))
    members = [{"agent_id": a1["id"], "volume": v} for v in ("l0", "l0-other-portal")]
    r = api.post("/volume-sets", json={"name": "s", "members": members, "stripe_unit": 4096})
    assert r.status_code == 422
    device = a1["volumes"][0]["device_id"]
    assert r.json()["errors"][0] == {
        "loc": ["body", "members", 1],
        "msg": f"members 0 and 1 are one device ({device}): agent 'a1' volume 'l0' and "
        "agent 'a1' volume 'l0-other-portal'",
        "type": "value_error",
    }


def test_a_transfer_into_a_held_destination_is_409_and_free_once_the_holder_is_final(
    api: Api,
) -> None:
    a1, a2, b1 = agent(api, "a1"), agent(api, "a2"), agent(api, "b1")
    src1, src2 = volume_set(api, "src1", [a1]), volume_set(api, "src2", [a2])
    dst = volume_set(api, "dst", [b1])
    first = ok(api.post("/transfers", json={"source": src1["id"], "destination": dst["id"]}))
    r = api.post("/transfers", json={"source": src2["id"], "destination": dst["id"]})
    assert r.status_code == 409
    assert r.json()["detail"] == (
        "the destination's agent 'b1' volume 'v0' ("
        + b1["volumes"][0]["device_id"]
        + f") is the destination of transfer {first['id']} (queued, from 'src1' to 'dst'): "
        "a destination belongs to one transfer at a time (cancel that transfer, or wait "
        "until it completes)"
    )
    ok(api.post(f"/transfers/{first['id']}/cancel"), 200)
    ok(api.post("/transfers", json={"source": src2["id"], "destination": dst["id"]}))


def pacing_of(c: Api, tid: str) -> list[Json]:
    response = c.get(f"/transfers/{tid}/pacing")
    assert response.status_code == 200, response.text
    rates: list[Json] = response.json()
    return rates


def test_a_transfers_nic_pacing_rates_are_json_by_agent_and_nic(api: Api) -> None:
    a1, b1 = agent(api, "a1"), agent(api, "b1")
    src, dst = volume_set(api, "src", [a1]), volume_set(api, "dst", [b1])
    tid = ok(api.post("/transfers", json={"source": src["id"], "destination": dst["id"]}))["id"]
    assert pacing_of(api, tid) == []
    with Session(api.engine) as session:
        telemetry.record_nic_rates(session, tid, a1["id"], {"eth1": 62_500_000, "eth0": 125})
        session.commit()
    rates = pacing_of(api, tid)
    assert [(r["agent"], r["nic"], r["rate_bytes_per_second"]) for r in rates] == [
        ("a1", "eth0", 125),
        ("a1", "eth1", 62_500_000),
    ]
    assert all(r["updated_at"] for r in rates)
    assert api.get("/transfers/ghost/pacing").status_code == 404


def test_a_repeated_idempotency_key_returns_the_first_transfer(api: Api) -> None:
    a1, b1 = agent(api, "a1"), agent(api, "b1")
    src, dst = volume_set(api, "src", [a1]), volume_set(api, "dst", [b1])
    body = {"source": src["id"], "destination": dst["id"]}
    key = {"Idempotency-Key": "0b6f7c1e-retry-me"}
    first = ok(api.post("/transfers", json=body, headers=key))
    assert first["idempotency_key"] == "0b6f7c1e-retry-me"
    again = ok(api.post("/transfers", json=body, headers=key), 200)  # not a second one
    assert again["id"] == first["id"]
    assert len(ok(api.get("/transfers"), 200)) == 1
    other = api.post("/transfers", json={**body, "streams_per_pair": 2}, headers=key)
    assert other.status_code == 409
    assert "was used for another request (transfer " + first["id"] in other.json()["detail"]
    assert other.json()["code"] == "idempotency_key_reused"
    # without a key, the same request is a new one: refused, its destination is held
    assert api.post("/transfers", json=body).status_code == 409


@pytest.mark.parametrize("key", ["", "with space", "x" * 256, "tab\there"])
def test_a_malformed_idempotency_key_is_422(api: Api, key: str) -> None:
    a1, b1 = agent(api, "a1"), agent(api, "b1")
    src, dst = volume_set(api, "src", [a1]), volume_set(api, "dst", [b1])
    body = {"source": src["id"], "destination": dst["id"]}
    r = api.post("/transfers", json=body, headers={"Idempotency-Key": key})
    assert r.status_code == 422, r.text
    assert len(ok(api.get("/transfers"), 200)) == 0
