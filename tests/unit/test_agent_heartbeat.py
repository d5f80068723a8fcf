"""The agent's heartbeats (through httpx's mock transport) and how the coordinator
shows an agent from them."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from reservoir.agent.control.heartbeat import HEARTBEAT_PATH, Heartbeat
from reservoir.server.app.services import agents

URL = "https://coord.example:8470"


def _beats(answers: list[int | Exception], caplog: pytest.LogCaptureFixture) -> list[bool]:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        now = answers[len(seen) - 1]
        if isinstance(now, Exception):
            raise now
        return httpx.Response(now, json={"detail": "bad token"} if now != 200 else {})

    beat = Heartbeat(URL, "hb-token", 1.0, transport=httpx.MockTransport(answer), name="disk1")

    async def main() -> list[bool]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as c:
            return [await beat.beat(c) for _ in answers]

    with caplog.at_level(logging.INFO, logger="reservoir.agent"):
        took = asyncio.run(main())
    assert all(r.url == URL + HEARTBEAT_PATH for r in seen)
    assert all(r.headers["authorization"] == "Bearer hb-token" for r in seen)
    return took


def test_heartbeats_log_when_they_start_failing_and_when_they_reach_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    down = httpx.ConnectError("connection refused")
    took = _beats([200, down, down, 401, 200, 200], caplog)
    assert took == [True, False, False, False, True, True]
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in said] == ["INFO", "WARNING", "WARNING", "INFO"]
    assert "ConnectError: connection refused" in said[1][1]
    assert "HTTP 401: bad token" in said[2][1]  # a new reason: said again
    # what the operator checks: the registration, the token file
    assert "is agent 'disk1' registered there (reservoir agent register disk1" in said[2][1]
    assert "'reservoir server agent-credentials disk1'" in said[2][1]


def _agent(status: str, last: datetime | None) -> Any:
    return SimpleNamespace(status=status, last_heartbeat_at=last)


def test_an_agent_whose_heartbeats_stopped_is_unreachable() -> None:
    now = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)
    assert agents.status(_agent("registered", None), 60, now) == "registered"
    assert agents.status(_agent("ok", now - timedelta(seconds=59)), 60, now) == "ok"
    assert agents.status(_agent("ok", now - timedelta(seconds=61)), 60, now) == "unreachable"
