"""Webhooks: each URL of ``webhook_urls`` is told when a transfer ends.

When a transfer enters ``completed``, ``failed`` or ``cancelled``, one delivery per URL
is added to ``webhook_deliveries`` in the same transaction as the change (an outbox:
no end is lost to a crash between the change and the call). The leading coordinator's
:class:`WebhookSender` POSTs each as JSON::

    {"event": "transfer.completed", "at": "...", "delivery": 12,
     "transfer": {"id", "state", "labels", "source", "destination", "total_bytes",
                  "done_bytes", "verification", "created_at", "started_at",
                  "completed_at", "last_error"}}

with ``X-Reservoir-Event``, ``X-Reservoir-Delivery`` (retries carry the same) and, with
``webhook_secret_file``, ``X-Reservoir-Signature: sha256=<hex HMAC of the body>``. A
2xx answer delivers it; anything else is tried again after 2, 4, 8 ... seconds (at most
10 minutes apart), :data:`MAX_ATTEMPTS` times in all, then given up, with the last
error kept. Deliveries are at least once: a receiver dedupes by the delivery id.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from reservoir.common.aio import cancel_and_wait
from reservoir.server.app.tables import Transfer, WebhookDelivery, utcnow

__all__ = ["ENDS", "MAX_ATTEMPTS", "WebhookSender", "enqueue", "sign"]

ENDS = ("completed", "failed", "cancelled")
MAX_ATTEMPTS = 12
MAX_DELAY_S = 600.0
TIMEOUT_S = 10.0
BATCH = 50
URLS_KEY = "webhook_urls"  # in the sessions' info: where enqueue finds the URLs
log = logging.getLogger("reservoir.server.webhooks")


def enqueue(session: Session, transfer: Transfer, state: str) -> None:
    """A delivery to each webhook URL of the session's coordinator, if ``state`` ends
    ``transfer`` (committed with the caller's session)."""
    urls: list[str] = session.info.get(URLS_KEY) or []
    if state not in ENDS or not urls:
        return
    event = f"transfer.{state}"
    payload = {"event": event, "transfer": _transfer(transfer, state)}
    for url in urls:
        session.add(WebhookDelivery(transfer_id=transfer.id, url=url, event=event, payload=payload))


def _transfer(transfer: Transfer, state: str) -> dict[str, Any]:
    def iso(value: Any) -> str | None:
        return None if value is None else value.isoformat()

    return {
        "id": transfer.id,
        "state": state,
        "labels": transfer.labels,
        "source": transfer.source_set_id,
        "destination": transfer.dest_set_id,
        "total_bytes": transfer.total_bytes,
        "done_bytes": transfer.done_bytes,
        "verification": transfer.verification if transfer.verify else "off",
        "created_at": iso(transfer.created_at),
        "started_at": iso(transfer.started_at),
        "completed_at": iso(transfer.completed_at),
        "last_error": transfer.last_error,
    }


def sign(secret: bytes, body: bytes) -> str:
    """The signature header's value: ``sha256=`` and the hex HMAC-SHA256 of ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


class WebhookSender:
    """Sends due deliveries every ``interval`` seconds (the leader's loop)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        secret: bytes | None = None,
        interval: float = 1.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.sessions = sessions
        self.secret = secret
        self.interval = interval
        self._http = httpx.AsyncClient(timeout=TIMEOUT_S, transport=transport)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="reservoir-webhooks")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        await self._http.aclose()

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # a pass must never end the loop
                log.exception("webhook pass failed")
            await asyncio.sleep(self.interval)

    async def tick(self) -> int:
        """Sends what is due; how many were delivered. No transaction stays open while
        the receivers answer (a SQLite reader would hold writers back meanwhile)."""
        with self.sessions() as session:
            due = session.scalars(
                select(WebhookDelivery)
                .where(
                    WebhookDelivery.delivered_at.is_(None),
                    WebhookDelivery.gave_up.is_(False),
                    WebhookDelivery.next_attempt_at <= utcnow(),
                )
                .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id)
                .limit(BATCH)
            ).all()
        answers = await asyncio.gather(*(self._post(d) for d in due))
        with self.sessions() as session:
            for delivery, error in zip(due, answers, strict=True):
                session.add(delivery)  # detached when the first session closed
                _settle(delivery, error)
            session.commit()
        return sum(1 for error in answers if error is None)

    async def _post(self, delivery: WebhookDelivery) -> str | None:
        """Posts ``delivery``; None when the receiver took it, else why not."""
        body = json.dumps(
            {**delivery.payload, "delivery": delivery.id, "at": utcnow().isoformat()},
            separators=(",", ":"),
        ).encode()
        headers = {
            "Content-Type": "application/json",
            "X-Reservoir-Event": delivery.event,
            "X-Reservoir-Delivery": str(delivery.id),
        }
        if self.secret is not None:
            headers["X-Reservoir-Signature"] = sign(self.secret, body)
        try:
            answer = await self._http.post(delivery.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"[:1024]
        return None if answer.is_success else f"HTTP {answer.status_code}"


def _settle(delivery: WebhookDelivery, error: str | None) -> None:
    now = utcnow()
    delivery.attempts += 1
    if error is None:
        delivery.delivered_at, delivery.last_error = now, None
        return
    delivery.last_error = error
    if delivery.attempts >= MAX_ATTEMPTS:
        delivery.gave_up = True
        log.warning("webhook %s: gave up on delivery %d: %s", delivery.url, delivery.id, error)
        return
    delay = min(2.0**delivery.attempts, MAX_DELAY_S)
    delivery.next_attempt_at = now + timedelta(seconds=delay)
