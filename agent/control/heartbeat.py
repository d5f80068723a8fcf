"""Heartbeats: the agent tells its coordinator every ``heartbeat_interval`` seconds
that it is alive (``POST /api/v1/agents/heartbeat`` with its heartbeat token, which
says which agent it is). The coordinator shows an agent whose heartbeats stop as
unreachable. A heartbeat that fails is logged when the state changes (the first
failure, and when they reach the coordinator again), not every time, and the next is
sent on schedule: a coordinator that is down or restarting costs the agent nothing."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time

import httpx

from reservoir import __version__
from reservoir.common.aio import cancel_and_wait

__all__ = ["HEARTBEAT_PATH", "Heartbeat"]

log = logging.getLogger("reservoir.agent")

HEARTBEAT_PATH = "/api/v1/agents/heartbeat"
TIMEOUT_S = 10.0


class Heartbeat:
    """Sends heartbeats to ``url`` (the coordinator's base URL) with ``token``."""

    def __init__(
        self,
        url: str,
        token: str,
        interval: float,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        verify: ssl.SSLContext | bool = True,
        name: str = "",
    ) -> None:
        self.name = name  # the agent's, for what a refusal asks of its operator
        self.url = url.rstrip("/") + HEARTBEAT_PATH
        self._verify = verify
        self.interval = interval
        self._headers = {"Authorization": f"Bearer {token}"}
        self._transport = transport
        self._task: asyncio.Task[None] | None = None
        self.sent = self.failed = 0
        self.last_ok: float | None = None  # time.time() of the last one the coordinator took
        self.last_error: str | None = None  # why the last one failed (None: it did not)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="heartbeat")

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        async with self.client() as client:
            while True:
                await self.beat(client)
                await asyncio.sleep(self.interval)

    def client(self) -> httpx.AsyncClient:
        """The client heartbeats are sent with (the coordinator's CA, if one is given)."""
        return httpx.AsyncClient(timeout=TIMEOUT_S, transport=self._transport, verify=self._verify)

    async def beat(self, client: httpx.AsyncClient) -> bool:
        """One heartbeat; whether the coordinator took it."""
        self.sent += 1
        try:
            reply = await client.post(
                self.url, json={"status": "ok", "version": __version__}, headers=self._headers
            )
            error = None if reply.status_code == 200 else _refusal(reply, self.name)
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if error is None:
            if self.last_error is not None or self.last_ok is None:
                log.info("heartbeats reach the coordinator (%s)", self.url)
            self.last_ok, self.last_error = time.time(), None
            return True
        self.failed += 1
        if error != self.last_error:
            log.warning("heartbeat to %s failed: %s (sent again every %g s)", self.url, error,
                        self.interval)  # fmt: skip
        self.last_error = error
        return False


def _refusal(reply: httpx.Response, name: str) -> str:
    """The coordinator's answer, and for a token it does not know (an agent not yet
    registered, or given another's token) what the operator checks."""
    try:
        detail = reply.json().get("detail", "")
    except ValueError:
        detail = reply.text[:200]
    said = f"HTTP {reply.status_code}: {detail}"
    if reply.status_code != 401:
        return said
    agent = name or "NAME"
    return (
        f"{said}: the coordinator knows agents by the tokens it derives from their names; "
        f"is agent {agent!r} registered there (reservoir agent register {agent} --url URL), "
        "and does coordinator_token_file hold the heartbeat token that "
        f"'reservoir server agent-credentials {agent}' prints on the coordinator's host?"
    )
