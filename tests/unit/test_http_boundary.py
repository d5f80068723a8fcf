"""The HTTP boundary of both apps, driven through ASGI with a ``receive`` that counts what
the app asked for: no body is read before the token is checked, a body is counted
against its limit, NaN is found wherever JSON puts it, and a 422 carries no input."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from reservoir.agent.control import Agent, AgentSettings
from reservoir.agent.control.main import create_app as create_agent_app
from reservoir.common.http_boundary import (
    MAX_ERRORS,
    NON_FINITE,
    JsonWatch,
    NonFiniteJsonError,
    has_non_finite_number,
    public_errors,
)
from reservoir.server import ServerSettings, create_app
from reservoir.server.app.db import make_engine, upgrade

USER = "unit-user-token-0123456789abcdef"
WRONG = "wrong-token-0123456789abcdef"
BODY_METHODS = ("post", "put", "patch")


@dataclass
class Exchange:
    """One request through an app's ASGI interface: what the app read, what it sent."""

    chunks: list[bytes]
    reads: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)

    async def receive(self) -> dict[str, Any]:
        self.reads += 1
        if self.reads > len(self.chunks):
            return {"type": "http.disconnect"}
        more = self.reads < len(self.chunks)
        return {"type": "http.request", "body": self.chunks[self.reads - 1], "more_body": more}

    async def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def problem(self) -> Any:
        return json.loads(b"".join(m.get("body", b"") for m in self.messages[1:]))


def call(
    app: FastAPI,
    method: str,
    path: str,
    chunks: list[bytes],
    token: str | None = None,
    *,
    declared: bool = True,
) -> Exchange:
    headers = [(b"content-type", b"application/json")]
    if declared:
        headers.append((b"content-length", str(sum(map(len, chunks))).encode()))
    else:
        headers.append((b"transfer-encoding", b"chunked"))
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method.upper(),
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    exchange = Exchange(chunks)
    asyncio.run(app(scope, exchange.receive, exchange.send))  # type: ignore[arg-type]
    return exchange


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    db = tmp_path_factory.mktemp("boundary") / "server.db"
    settings = ServerSettings(
        database_url=f"sqlite:///{db}",
        user_tokens=[USER],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        scheduler="off",
        max_body_bytes=4096,
    )
    engine = make_engine(settings.database_url)  # as the app's lifespan would: the token
    upgrade(engine)  # check looks agents' names up in the database
    engine.dispose()
    return create_app(settings)


@pytest.fixture(scope="module")
def agent_app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    state = tmp_path_factory.mktemp("agent-boundary")
    settings = AgentSettings(
        tokens=[USER],  # type: ignore[list-item]
        state_dir=Path(state),
        max_body_bytes=4096,
    )
    return create_agent_app(Agent(settings))


def operations_with_a_body(app: FastAPI) -> Iterator[tuple[str, str]]:
    for path, item in app.openapi()["paths"].items():
        for method in item:
            if method in BODY_METHODS:
                yield method, path.replace("{", "").replace("}", "")


@pytest.mark.parametrize("app_name", ["coordinator", "agent_app"])
@pytest.mark.parametrize("token", [None, WRONG])
def test_no_route_reads_a_byte_of_body_before_the_token(
    request: pytest.FixtureRequest, app_name: str, token: str | None
) -> None:
    app: FastAPI = request.getfixturevalue(app_name)
    operations = list(operations_with_a_body(app))
    assert len(operations) >= 5
    for method, path in operations:
        exchange = call(app, method, path, [b"{" * 1024], token)
        assert (method, path, exchange.status, exchange.reads) == (method, path, 401, 0)


def test_a_body_declared_over_the_limit_is_refused_unread(coordinator: FastAPI) -> None:
    exchange = call(coordinator, "post", "/api/v1/links", [b" " * 5000], USER)
    assert (exchange.status, exchange.reads) == (413, 0)
    assert "4096 bytes (the setting max_body_bytes)" in exchange.problem["detail"]
    assert exchange.problem["code"] == "body_too_large"


def test_a_chunked_body_is_refused_as_it_passes_the_limit(agent_app: FastAPI) -> None:
    chunks = [b" " * 1000] * 100
    exchange = call(agent_app, "post", "/api/v1/copies", chunks, USER, declared=False)
    assert exchange.status == 413
    assert exchange.reads == 5  # the fifth chunk passed 4096 bytes; nothing more was read


def test_the_upload_has_a_larger_limit(coordinator: FastAPI) -> None:
    exchange = call(coordinator, "post", "/api/v1/campaigns/results", [b"{" + b" " * 8000 + b"}"])
    assert exchange.status == 401  # no token: refused before the body whatever its size
    upload = call(coordinator, "post", "/api/v1/campaigns/results", [b"[]" + b" " * 8000], USER)
    assert upload.status == 422  # read whole and validated: not an object


def test_nan_from_chunks_is_found_across_their_edges(agent_app: FastAPI) -> None:
    chunks = [b'{"stream_pacing_rates": {"0": -Inf', b"inity}}"]
    exchange = call(agent_app, "put", "/api/v1/copies/c/caps", chunks, USER, declared=False)
    assert exchange.status == 422
    assert exchange.problem["errors"] == [
        {"loc": ["body"], "msg": NON_FINITE, "type": "json_invalid"}
    ]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        (b'{"a": NaN}', True),
        (b"[1, Infinity]", True),
        (b'{"a": {"b": [-Infinity]}}', True),
        (b'{"NaN": "Infinity"}', False),
        (b'{"a": 1.5e308}', False),
        (b'{"a": 1,, "b": NaN}', False),  # not JSON before the word: the app says so
        (b"[" * 100_000 + b"NaN", False),  # too deep for the parser: the app says so
        (b"", False),
    ],
)
def test_non_finite_numbers_are_found_only_where_json_has_numbers(text: bytes, found: bool) -> None:
    assert has_non_finite_number(text) is found


def test_a_word_split_over_many_small_chunks_is_found() -> None:
    watch = JsonWatch()
    for byte in b'{"a": NaN}':
        watch.add(bytes([byte]))
    with pytest.raises(NonFiniteJsonError):
        watch.end()


def test_public_errors_keep_location_message_and_type_only() -> None:
    secret = "s" * 30
    errors: list[dict[str, Any]] = [
        {
            "type": "string_too_long",
            "loc": ("body", "name"),
            "msg": "String should have at most 128 characters",
            "input": secret,
            "ctx": {"max_length": 128},
        },
        {
            "type": "extra_forbidden",
            "loc": ("body", "k" * 500),
            "msg": "Value error, " + "v" * 1000,
            "input": secret,
        },
        {
            "type": "json_invalid",
            "loc": ("body", 7),
            "msg": "JSON decode error",
            "input": {},
            "ctx": {"error": "Expecting value"},
        },
    ]
    listed = public_errors(errors)
    assert secret not in json.dumps(listed)
    assert listed[0] == {
        "loc": ["body", "name"],
        "msg": "String should have at most 128 characters",
        "type": "string_too_long",
    }
    assert len(listed[1]["loc"][1]) <= 64 and len(listed[1]["msg"]) <= 200
    assert listed[2]["msg"] == "JSON decode error: Expecting value"
    assert listed[2]["loc"] == ["body", 7]


def test_public_errors_are_capped() -> None:
    errors = [{"type": "missing", "loc": ("body", i), "msg": "Field required"} for i in range(50)]
    listed = public_errors(errors)
    assert len(listed) == MAX_ERRORS + 1
    assert listed[-1] == {"loc": [], "msg": "and 30 more errors", "type": "too_many_errors"}
