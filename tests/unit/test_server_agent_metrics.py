"""The coordinator's agent series: agents by status, and each one's last heartbeat."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session, sessionmaker

from reservoir.server.app import metrics
from reservoir.server.app.tables import Agent, utcnow


def test_agents_are_counted_by_status_with_their_last_heartbeat(
    sessions: sessionmaker[Session],
) -> None:
    now = utcnow()
    with sessions() as session:
        session.add_all(
            [
                Agent(
                    name="fresh",
                    control_url="http://h:1",
                    capabilities=[],
                    status="ok",
                    last_heartbeat_at=now,
                ),
                Agent(
                    name="silent",
                    control_url="http://h:2",
                    capabilities=[],
                    status="ok",
                    last_heartbeat_at=now - timedelta(seconds=300),
                ),
                Agent(name="new", control_url="http://h:3", capabilities=[]),
            ]
        )
        session.commit()
        text = metrics.render(session, unreachable_after=60).decode()
    got = {f.name: f.samples for f in text_string_to_metric_families(text)}
    counts = {s.labels["status"]: s.value for s in got["reservoir_agents"]}
    assert counts == {"ok": 1, "unreachable": 1, "registered": 1}
    heard = {
        s.labels["agent"]: s.value for s in got["reservoir_agent_last_heartbeat_timestamp_seconds"]
    }
    assert set(heard) == {"fresh", "silent"}
    assert heard["fresh"] == pytest.approx(now.timestamp(), abs=1e-3)
