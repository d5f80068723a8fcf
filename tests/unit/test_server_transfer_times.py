"""A transfer's times (first run, completion, the last start of running) and the rate
and ETA the API gives from them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from reservoir.server.app.events import stamp
from reservoir.server.app.services.transfers import pace
from reservoir.server.app.tables import Transfer

T0 = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)
MB = 10**6


def transfer(state: str = "queued", done: int = 0, total: int = 1000 * MB) -> Transfer:
    return Transfer(state=state, done_bytes=done, total_bytes=total, running_since_bytes=0)


def test_running_stamps_the_first_start_and_each_restart_with_the_bytes_then() -> None:
    t = transfer()
    stamp(t, "running", T0)
    t.done_bytes = 300 * MB
    stamp(t, "paused", T0 + timedelta(seconds=30))
    stamp(t, "running", T0 + timedelta(seconds=90))
    assert t.started_at == T0 and t.completed_at is None
    assert (t.running_since, t.running_since_bytes) == (T0 + timedelta(seconds=90), 300 * MB)
    stamp(t, "completed", T0 + timedelta(seconds=200))
    assert t.completed_at == T0 + timedelta(seconds=200)


def test_the_rate_counts_only_the_time_since_running_began_again() -> None:
    t = transfer("running", done=300 * MB)
    t.running_since, t.running_since_bytes = T0, 100 * MB  # resumed at 100 MB done
    shown = pace(t, T0 + timedelta(seconds=10))
    assert shown["rate_bps"] == 200 * MB * 8 / 10  # 160 Mbit/s
    assert shown["eta_seconds"] == 700 * MB * 8 / (200 * MB * 8 / 10)  # 35 s


def test_no_rate_before_a_second_of_data_or_when_not_running() -> None:
    t = transfer("running", done=10 * MB)
    t.running_since = T0
    assert pace(t, T0 + timedelta(seconds=0.5)) == {"rate_bps": None, "eta_seconds": None}
    t.state = "paused"
    assert pace(t, T0 + timedelta(seconds=5)) == {"rate_bps": None, "eta_seconds": None}
    stalled = transfer("running", done=0)
    stalled.running_since = T0
    assert pace(stalled, T0 + timedelta(seconds=5))["rate_bps"] is None
