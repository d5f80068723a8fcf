"""Webhooks: a transfer's end queued in the same transaction (on SQLite and PostgreSQL),
posted to a real HTTP receiver, signed, retried after a refusal, given up at last."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fake_volumes import FakeVolumes
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker
from test_server_api import USER, Api, agent, volume_set
from test_server_telemetry import make_transfer

from reservoir.server.app import db, events, webhooks
from reservoir.server.app.core.config import ServerSettings
from reservoir.server.app.main import create_app
from reservoir.server.app.tables import Transfer, WebhookDelivery, utcnow

SECRET = b"webhook-secret-0123456789"
Json = dict[str, Any]


class Receiver:
    """An HTTP server on loopback answering each POST with the next of ``statuses``."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.got: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.got.append((dict(self.headers.items()), body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/reservoir"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver([])
    yield r
    r.close()


@pytest.fixture
def sessions(engine: Engine, receiver: Receiver) -> sessionmaker[Session]:
    """Sessions of a coordinator whose webhook is ``receiver``."""
    return db.make_sessions(engine, info={webhooks.URLS_KEY: [receiver.url]})


def end(sessions: sessionmaker[Session], state: str = "completed") -> str:
    with sessions() as session:
        tid = make_transfer(session)
        transfer = session.get(Transfer, tid)
        assert transfer is not None
        events.record(session, transfer, "state", "ends", from_state="running", to_state=state)
        transfer.state = state
        session.commit()
    return tid


def send(sessions: sessionmaker[Session]) -> int:
    async def once() -> int:
        sender = webhooks.WebhookSender(sessions, secret=SECRET)
        try:
            return await sender.tick()
        finally:
            await sender.stop()

    return asyncio.run(once())


def deliveries(sessions: sessionmaker[Session]) -> list[WebhookDelivery]:
    with sessions() as session:
        return list(session.scalars(select(WebhookDelivery).order_by(WebhookDelivery.id)))


def test_an_end_is_posted_once_signed_with_the_transfer(
    sessions: sessionmaker[Session], receiver: Receiver
) -> None:
    tid = end(sessions, "completed")
    assert send(sessions) == 1
    assert send(sessions) == 0  # delivered: not sent again
    [(headers, body)] = receiver.got
    expected = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    assert headers["X-Reservoir-Signature"] == expected
    assert headers["X-Reservoir-Event"] == "transfer.completed"
    sent = json.loads(body)
    assert sent["event"] == "transfer.completed" and sent["transfer"]["id"] == tid
    assert sent["transfer"]["state"] == "completed" and sent["delivery"] == int(
        headers["X-Reservoir-Delivery"]
    )
    [d] = deliveries(sessions)
    assert d.delivered_at is not None and d.attempts == 1


def test_a_refusal_is_tried_again_later_then_given_up(
    sessions: sessionmaker[Session], receiver: Receiver
) -> None:
    end(sessions, "failed")
    receiver.statuses = [500] * webhooks.MAX_ATTEMPTS
    assert send(sessions) == 0
    [d] = deliveries(sessions)
    assert d.last_error == "HTTP 500" and d.attempts == 1
    assert d.next_attempt_at > utcnow() + timedelta(seconds=1)
    assert send(sessions) == 0 and len(receiver.got) == 1  # not due yet
    for _ in range(webhooks.MAX_ATTEMPTS - 1):
        with sessions() as session:
            row = session.get(WebhookDelivery, d.id)
            assert row is not None
            row.next_attempt_at = utcnow() - timedelta(seconds=1)
            session.commit()
        send(sessions)
    [d] = deliveries(sessions)
    assert d.gave_up and d.attempts == webhooks.MAX_ATTEMPTS and d.delivered_at is None
    assert len(receiver.got) == webhooks.MAX_ATTEMPTS
    assert len({h["X-Reservoir-Delivery"] for h, _ in receiver.got}) == 1  # one delivery id


def test_only_ends_are_queued(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        tid = make_transfer(session)
        transfer = session.get(Transfer, tid)
        assert transfer is not None
        events.record(session, transfer, "state", "paused", to_state="paused")
        events.record(session, transfer, "scheduler", "a note")
        session.commit()
    assert deliveries(sessions) == []


def test_a_cancel_through_the_api_queues_the_delivery(
    database_url: str, receiver: Receiver
) -> None:
    settings = ServerSettings(
        database_url=database_url,
        user_tokens=[USER],  # type: ignore[list-item]
        scheduler="off",
        webhook_urls=[receiver.url],  # type: ignore[list-item]
    )
    engine = db.make_engine(database_url)
    db.upgrade(engine)
    agents = FakeVolumes()
    with Api(create_app(settings, engine=engine, volume_lister=agents), agents, engine) as c:
        src, dst = volume_set(c, "s", [agent(c, "a")]), volume_set(c, "d", [agent(c, "b")])
        t = c.post("/transfers", json={"source": src["id"], "destination": dst["id"]}).json()
        assert c.post(f"/transfers/{t['id']}/cancel").status_code == 200
    sessions = db.make_sessions(engine)
    [d] = deliveries(sessions)
    assert (d.url, d.event, d.payload["transfer"]["id"]) == (
        receiver.url,
        "transfer.cancelled",
        t["id"],
    )
    engine.dispose()
