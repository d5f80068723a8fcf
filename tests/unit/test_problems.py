"""Error answers as problem details (RFC 9457) with a code and a request id: on a small
app built from the shared pieces, on the coordinator and on the agent's control API;
the request id in every answer, in the log records and on to the agents; the codes
registry, the OpenAPI document and the clients that read the answers."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_volumes import FakeVolumes
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel
from test_control_api import api as agent_api
from test_control_api import endless_copy, vol
from test_error_trees import exceptions

from reservoir.agent.control.errors import ControlError
from reservoir.common.http_boundary import RefusedError, install_problems
from reservoir.common.logs import JsonFormatter
from reservoir.common.problems import CODES, MEDIA_TYPE, TYPE_BASE, codes_table
from reservoir.common.request_id import RequestIdFilter, current_request_id
from reservoir.server import ServerSettings, create_app
from reservoir.server.app import db
from reservoir.server.app.agent_client import AgentRef, HttpAgentClient
from reservoir.server.app.core.agent_credentials import AgentCredentials
from reservoir.server.app.errors import ServerError
from reservoir.server.app.services import transfer_query
from reservoir.server.clients.client import api_error

USER = "unit-user-token-0123456789abcdef"
SECRET = "the-input-that-must-not-come-back-0123"
MEMBERS = {"type", "title", "status", "detail", "instance", "code", "request_id"}
README = Path(__file__).resolve().parents[2] / "README.md"

log = logging.getLogger("reservoir.test.problems")


def call(app: FastAPI, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One request to ``app`` through httpx's ASGI transport, in a loop of its own."""

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as c:
            return await c.request(method, path, **kwargs)

    return asyncio.run(send())


def problem(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The problem of ``r``, checked: its status, media type, members, code, type and
    request id (the header's)."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == MEDIA_TYPE
    body: dict[str, Any] = r.json()
    assert MEMBERS <= set(body) <= MEMBERS | {"errors"}
    assert (body["status"], body["code"]) == (status, code)
    assert body["type"] == TYPE_BASE + code and body["title"] == CODES[code].title
    assert body["instance"] == r.request.url.path
    assert body["request_id"] == r.headers["x-request-id"]
    assert isinstance(body["detail"], str) and body["detail"]
    return body


# ---------------------------------------------------------------- a small app


class Item(BaseModel):
    size: int


def small_app() -> FastAPI:
    """An app with the shared pieces only, and a route for each kind of error."""
    app = FastAPI()

    @app.post("/items")
    def create_item(item: Item) -> dict[str, int]:
        return {"size": item.size}

    @app.get("/taken")
    def taken() -> None:
        raise HTTPException(409, "the name is taken")

    @app.get("/crash")
    def crash() -> None:
        raise RuntimeError(f"internal state {SECRET}")

    @app.get("/logged")
    def logged() -> dict[str, str | None]:
        log.warning("answering")
        return {"seen": current_request_id.get()}

    install_problems(app)
    return app


@pytest.fixture(scope="module")
def small() -> FastAPI:
    return small_app()


def test_an_unknown_route_is_a_404_problem_naming_the_path(small: FastAPI) -> None:
    body = problem(call(small, "GET", "/nowhere"), 404, "not_found")
    assert body["detail"] == "nothing at /nowhere"


def test_a_method_the_route_does_not_take_is_a_405_problem_with_allow(small: FastAPI) -> None:
    r = call(small, "DELETE", "/items")
    body = problem(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "POST" and "DELETE" in body["detail"]


def test_an_http_error_keeps_its_detail_and_takes_its_status_code(small: FastAPI) -> None:
    body = problem(call(small, "GET", "/taken"), 409, "conflict")
    assert body["detail"] == "the name is taken"


def test_a_422_lists_the_fields_in_errors_without_the_input(small: FastAPI) -> None:
    r = call(small, "POST", "/items", json={"size": SECRET})
    body = problem(r, 422, "validation_failed")
    assert SECRET not in r.text
    [error] = body["errors"]
    assert error["loc"] == ["body", "size"] and set(error) == {"loc", "msg", "type"}
    assert body["detail"] == f"size: {error['msg']}"


def test_a_body_that_is_not_json_is_a_422_problem(small: FastAPI) -> None:
    r = call(
        small, "POST", "/items", content=b"{oops", headers={"content-type": "application/json"}
    )
    body = problem(r, 422, "validation_failed")
    assert body["errors"][0]["type"] == "json_invalid"


def test_an_unhandled_exception_is_a_500_that_says_nothing_of_it(
    small: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.handler.addFilter(RequestIdFilter())
    with caplog.at_level(logging.ERROR, logger="reservoir.http"):
        r = call(small, "GET", "/crash")
    body = problem(r, 500, "internal_error")
    assert SECRET not in r.text and "RuntimeError" not in r.text
    [record] = [x for x in caplog.records if x.name == "reservoir.http"]
    assert record.request_id == body["request_id"]  # type: ignore[attr-defined]
    assert record.exc_info is not None and SECRET in str(record.exc_info[1])


def test_a_success_carries_a_new_request_id_each_time(small: FastAPI) -> None:
    ids = {call(small, "POST", "/items", json={"size": 1}).headers["x-request-id"] for _ in "ab"}
    assert len(ids) == 2 and all(len(i) == 32 for i in ids)


@pytest.mark.parametrize("given", ["abc", "trace.2026-11_27-x", "x" * 128])
def test_a_sane_request_id_is_kept(small: FastAPI, given: str) -> None:
    ok = call(small, "GET", "/logged", headers={"X-Request-ID": given})
    assert ok.headers["x-request-id"] == given and ok.json() == {"seen": given}
    refused = call(small, "GET", "/nowhere", headers={"X-Request-ID": given})
    assert problem(refused, 404, "not_found")["request_id"] == given


@pytest.mark.parametrize("given", ["", "with space", "x" * 129, "a/b", "id\u00e9", "a;b=c"])
def test_an_insane_request_id_is_replaced(small: FastAPI, given: str) -> None:
    r = call(small, "GET", "/nowhere", headers={"X-Request-ID": given.encode("utf-8")})
    chosen = problem(r, 404, "not_found")["request_id"]
    assert chosen != given and len(chosen) == 32


def test_a_log_record_of_a_request_carries_its_id_into_the_json_line(
    small: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.handler.addFilter(RequestIdFilter())
    with caplog.at_level(logging.WARNING, logger=log.name):
        r = call(small, "GET", "/logged", headers={"X-Request-ID": "trace-7"})
    [record] = [x for x in caplog.records if x.name == log.name]
    assert r.status_code == 200
    assert json.loads(JsonFormatter().format(record))["request_id"] == "trace-7"


def test_a_json_line_logged_outside_a_request_has_no_request_id() -> None:
    record = logging.LogRecord("reservoir.x", logging.INFO, __file__, 1, "idle", (), None)
    RequestIdFilter().filter(record)
    assert "request_id" not in json.loads(JsonFormatter().format(record))


# ---------------------------------------------------------------- the coordinator


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FastAPI]:
    """The coordinator on a migrated SQLite database, with a body limit of 4096 bytes
    and fake agents that report one volume each."""
    path = tmp_path_factory.mktemp("problems") / "server.db"
    settings = ServerSettings(
        database_url=f"sqlite:///{path}",
        user_tokens=[USER],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        scheduler="off",
        max_body_bytes=4096,
    )
    engine = db.make_engine(settings.database_url)
    db.upgrade(engine)
    yield create_app(settings, engine=engine, volume_lister=FakeVolumes())
    engine.dispose()


AUTH = {"Authorization": f"Bearer {USER}"}


def agent_body(name: str, url: str = "http://127.0.0.1:8740") -> dict[str, Any]:
    return {
        "name": name,
        "control_url": url,
        "nics": [{"name": "eth0", "address": "10.0.0.1", "speed_bps": 10**10}],
        "volumes": [{"name": "v0", "path": "/v0", "size_bytes": 1 << 20}],
    }


def register(app: FastAPI, name: str) -> dict[str, Any]:
    body = agent_body(name, f"http://{name}.test:8740")
    volumes: FakeVolumes = app.state.volume_lister
    r = call(app, "POST", "/api/v1/agents", json=volumes.has(body), headers=AUTH)
    assert r.status_code == 201, r.text
    made: dict[str, Any] = r.json()
    return made


@dataclass(frozen=True)
class Case:
    """A request and the problem it gets: its status and code."""

    method: str
    path: str
    status: int
    code: str
    kwargs: dict[str, Any] = field(default_factory=dict)


WRONG = {"Authorization": "Bearer wrong-token-0123456789"}
COORDINATOR_CASES = [
    Case("GET", "/api/v1/no-such-route", 404, "not_found"),
    Case("GET", "/api/v1/transfers/nope", 404, "not_found", {"headers": AUTH}),
    Case("DELETE", "/api/v1/transfers", 405, "method_not_allowed", {"headers": AUTH}),
    Case("GET", "/api/v1/transfers", 401, "unauthorized"),
    Case("POST", "/api/v1/links", 401, "unauthorized", {"content": b"[]", "headers": WRONG}),
    Case("POST", "/api/v1/links", 413, "body_too_large", {"content": b" " * 5000, "headers": AUTH}),
    Case("POST", "/api/v1/agents", 422, "validation_failed", {"json": [SECRET], "headers": AUTH}),
    Case(
        "POST", "/api/v1/agents", 422, "validation_failed", {"content": b"[NaN]", "headers": AUTH}
    ),
]


@pytest.mark.parametrize("case", COORDINATOR_CASES, ids=lambda c: f"{c.status}-{c.path}")
def test_each_error_of_the_coordinator_is_a_problem(coordinator: FastAPI, case: Case) -> None:
    r = call(coordinator, case.method, case.path, **case.kwargs)
    problem(r, case.status, case.code)
    assert SECRET not in r.text


def test_a_conflict_of_the_coordinator_is_a_409_problem(coordinator: FastAPI) -> None:
    register(coordinator, "dup")
    again = agent_body("dup", "http://dup.test:8740")
    r = call(coordinator, "POST", "/api/v1/agents", json=again, headers=AUTH)
    body = problem(r, 409, "conflict")
    assert body["detail"] == "an agent named 'dup' is registered already"


def test_a_registry_rule_is_a_422_problem_naming_the_field(coordinator: FastAPI) -> None:
    members = [{"agent_id": "no-such-agent", "volume": "v0"}]
    r = call(
        coordinator,
        "POST",
        "/api/v1/volume-sets",
        json={"name": "s", "members": members},
        headers=AUTH,
    )
    body = problem(r, 422, "validation_failed")
    assert body["errors"] == [
        {
            "loc": ["body", "members", 0, "agent_id"],
            "msg": "no agent 'no-such-agent'",
            "type": "value_error",
        }
    ]
    assert body["detail"] == "members.0.agent_id: no agent 'no-such-agent'"


def test_a_crash_of_the_coordinator_is_a_500_without_its_text(
    coordinator: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError(f"database password {SECRET}")

    monkeypatch.setattr(transfer_query, "page", broken)
    r = call(coordinator, "GET", "/api/v1/transfers", headers={**AUTH, "X-Request-ID": "crash-1"})
    assert problem(r, 500, "internal_error")["request_id"] == "crash-1"
    assert SECRET not in r.text


def test_the_coordinator_echoes_a_sane_request_id_on_a_success(coordinator: FastAPI) -> None:
    r = call(coordinator, "GET", "/api/v1/health", headers={"X-Request-ID": "probe-42"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "probe-42"


# ------------------------------------------------------- the coordinator and its agents


Handler = Callable[[httpx.Request], httpx.Response]


def proxied(app: FastAPI, handler: Handler) -> dict[str, Any]:
    """An agent registered on ``app``, whose control API ``handler`` plays for the
    routes that reach agents (``/agents/{id}/...``)."""
    made = register(app, f"agent-{len(app.state.volume_lister.by_url)}")
    transport = httpx.MockTransport(handler)
    app.state.agent_proxy = HttpAgentClient(app.state.credentials, transport=transport)
    return made


def test_the_coordinator_passes_its_request_id_to_the_agent(coordinator: FastAPI) -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("x-request-id"))
        return httpx.Response(200, json={"name": "a", "cpu_seconds": 1.0})

    made = proxied(coordinator, handler)
    path = f"/api/v1/agents/{made['id']}/info"
    r = call(coordinator, "GET", path, headers={**AUTH, "X-Request-ID": "trace-both-logs"})
    assert r.status_code == 200 and seen == ["trace-both-logs"]


def test_an_agent_call_outside_a_request_carries_no_request_id() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"id": "c1"})

    async def main() -> None:
        client = HttpAgentClient(
            AgentCredentials(bytes(32)), transport=httpx.MockTransport(handler)
        )
        try:
            await client.get_copy(AgentRef("id", "a", "http://agent:8740"), "c1")
        finally:
            await client.aclose()

    asyncio.run(main())
    assert [r.headers.get("x-request-id") for r in seen] == [None]


def test_an_agents_refusal_comes_back_with_its_status_and_code(coordinator: FastAPI) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        answer = {"detail": "port 5201 is in use", "code": "port_in_use", "status": 409}
        return httpx.Response(409, json=answer)

    made = proxied(coordinator, handler)
    path = f"/api/v1/agents/{made['id']}/iperf/servers"
    r = call(coordinator, "POST", path, json={"address": "10.0.0.1"}, headers=AUTH)
    body = problem(r, 409, "port_in_use")
    assert body["detail"] == f"agent {made['name']}: port 5201 is in use"


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (httpx.Response(401, json={"detail": "the token is not valid"}), "agent_token_refused"),
        (httpx.Response(500, text="oops"), "agent_unreachable"),
    ],
)
def test_an_agent_that_cannot_serve_the_request_is_a_502(
    coordinator: FastAPI, answer: httpx.Response, code: str
) -> None:
    made = proxied(coordinator, lambda request: answer)
    r = call(coordinator, "GET", f"/api/v1/agents/{made['id']}/info", headers=AUTH)
    assert problem(r, 502, code)["detail"].startswith(f"agent {made['name']}: ")


# ---------------------------------------------------------------- the agent


def agent_call(tmp_path: Path, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One request to the agent's API (its copies never end), its lifespan run around."""

    async def main() -> httpx.Response:
        async with agent_api(tmp_path, endless_copy) as c:
            return await c.request(method, path, **kwargs)

    return asyncio.run(main())


AGENT_CASES = [
    Case("GET", "/copies/nope", 404, "not_found"),
    Case("GET", "/no-such-route", 404, "not_found"),
    Case("PUT", "/copies", 405, "method_not_allowed"),
    Case("GET", "/copies", 401, "unauthorized", {"headers": WRONG}),
    Case("POST", "/copies", 422, "validation_failed", {"json": {"source": SECRET, "dest": 7}}),
    Case(
        "POST", "/copies", 403, "volume_refused", {"json": {"source": "/etc/shadow", "dest": "/x"}}
    ),
]


@pytest.mark.parametrize("case", AGENT_CASES, ids=lambda c: f"{c.status}-{c.path}")
def test_each_error_of_the_agent_is_a_problem(tmp_path: Path, case: Case) -> None:
    r = agent_call(tmp_path, case.method, case.path, **case.kwargs)
    problem(r, case.status, case.code)
    assert SECRET not in r.text


def test_a_conflict_of_the_agent_is_a_409_problem(tmp_path: Path) -> None:
    async def main() -> httpx.Response:
        async with agent_api(tmp_path, endless_copy) as c:
            body = {"source": vol(tmp_path, "a"), "dest": vol(tmp_path, "b")}
            made = (await c.post("/copies", json=body)).json()
            return await c.post(f"/copies/{made['id']}/resume")

    body = problem(asyncio.run(main()), 409, "conflict")
    assert "resume" in body["detail"]


def test_the_agent_keeps_the_coordinators_request_id(tmp_path: Path) -> None:
    r = agent_call(tmp_path, "GET", "/copies", headers={"X-Request-ID": "trace-both-logs"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "trace-both-logs"


# ---------------------------------------------------------------- the codes


@pytest.mark.parametrize("root", [ServerError, ControlError, RefusedError])
def test_every_error_class_answers_a_registered_code(root: type) -> None:
    classes = [cls for cls in exceptions() if issubclass(cls, root)]
    codes = {cls.__name__: getattr(cls, "code", None) for cls in classes}
    assert len(codes) > 2
    assert all(code is None or code in CODES for code in codes.values()), codes
    assert all(code is not None for name, code in codes.items() if name != "RefusedError"), codes


def test_each_code_is_snake_case_with_a_title() -> None:
    for code, known in CODES.items():
        assert code == known.code and code.replace("_", "").isalpha() and code.islower()
        assert known.title and known.when and known.status[0] in "45"


def test_the_readme_lists_every_code() -> None:
    assert codes_table() in README.read_text()


def test_every_error_answer_of_the_openapi_document_is_a_problem(coordinator: FastAPI) -> None:
    document = call(coordinator, "GET", "/api/v1/openapi.json").json()
    problem_ref = {"$ref": "#/components/schemas/Problem"}
    errors = [
        (path, method, status, response)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        for status, response in operation["responses"].items()
        if status == "default" or status.startswith(("4", "5"))
    ]
    assert len(errors) > 50
    for path, method, status, response in errors:
        assert response["content"] == {MEDIA_TYPE: {"schema": problem_ref}}, (path, method, status)
        assert "X-Request-ID" in response["headers"], (path, method, status)
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    assert set(schemas["Problem"]["required"]) == MEMBERS
    assert all(
        f"`{code}`" in schemas["Problem"]["properties"]["code"]["description"] for code in CODES
    )


# ---------------------------------------------------------------- the clients


def answered(status: int, body: dict[str, Any]) -> httpx.Response:
    return httpx.Response(status, json=body, request=httpx.Request("GET", "http://c/x"))


def test_the_client_reads_a_problem_with_its_code_and_request_id() -> None:
    error = api_error(
        answered(
            409,
            {
                "detail": "the key named another request",
                "code": "idempotency_key_reused",
                "request_id": "r1",
            },
        )
    )
    assert (error.status, error.message, error.code, error.request_id) == (
        409,
        "the key named another request",
        "idempotency_key_reused",
        "r1",
    )
    assert str(error) == "HTTP 409 Conflict (idempotency_key_reused): the key named another request"


def test_the_client_names_no_code_that_only_repeats_the_status() -> None:
    error = api_error(
        answered(404, {"detail": "no transfer 'x'", "code": "not_found", "request_id": "r2"})
    )
    assert str(error) == "HTTP 404 Not Found: no transfer 'x'"


def test_the_client_names_the_request_id_of_a_server_error() -> None:
    error = api_error(
        answered(
            500, {"detail": "an unexpected error", "code": "internal_error", "request_id": "r3"}
        )
    )
    assert str(error) == "HTTP 500 Internal Server Error: an unexpected error (request id r3)"


def test_the_client_turns_the_errors_of_a_422_problem_into_field_lines() -> None:
    errors = [
        {"loc": ["body", "pacing", "margin"], "msg": "Value error, too big", "type": "value_error"}
    ]
    body = {"detail": "pacing.margin: too big", "code": "validation_failed", "errors": errors}
    assert api_error(answered(422, body)).lines() == [
        "HTTP 422 Unprocessable Entity: invalid request",
        "pacing.margin: too big",
    ]
