"""The target's login guard alone: its bounds, its deadline, its rate-limited log."""

from __future__ import annotations

import asyncio
import logging

import pytest

from reservoir.agent.target.login_guard import LoginGuard, PendingLogin, RateLimitedLog


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _never(pending: PendingLogin) -> None:
    raise AssertionError("expired")


def test_the_log_holds_back_records_within_the_interval_and_counts_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    records = RateLimitedLog(logging.getLogger("t"), "connections refused", 10.0, clock)
    with caplog.at_level(logging.WARNING, logger="t"):
        assert records.warning("refused %s", "a")
        assert not any(records.warning("refused %s", n) for n in range(5))
        records.flush()
        clock.now += 10
        assert records.warning("refused %s", "b")
        records.flush()  # nothing held back since: nothing said
    assert [r.getMessage() for r in caplog.records] == [
        "refused a",
        "5 more connections refused in the last 10 s",
        "refused b",
    ]


def test_a_record_after_the_interval_says_what_was_held_back_unflushed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    records = RateLimitedLog(logging.getLogger("t"), "logins timed out", 10.0, clock)
    with caplog.at_level(logging.WARNING, logger="t"):
        records.warning("x")
        records.warning("y")
        clock.now += 11
        records.warning("z")
    assert caplog.records[-1].getMessage() == "z (and 1 more like it in the last 10 s)"


@pytest.mark.parametrize(
    ("timeout", "total", "per_address", "key"),
    [
        (0.0, 64, 8, "login_timeout"),
        (-1.0, 64, 8, "login_timeout"),
        (float("nan"), 64, 8, "login_timeout"),
        (float("inf"), 64, 8, "login_timeout"),
        (15.0, 0, 8, "max_pending_logins"),
        (15.0, 64, 0, "max_pending_logins_per_address"),
    ],
)
def test_a_guard_without_a_bound_is_refused(
    timeout: float, total: int, per_address: int, key: str
) -> None:
    with pytest.raises(ValueError, match=key):
        LoginGuard(timeout=timeout, max_pending=total, max_per_address=per_address)


def test_the_bounds_count_per_address_and_in_total_and_places_come_back() -> None:
    async def scenario() -> None:
        guard = LoginGuard(timeout=60, max_pending=3, max_per_address=2)
        a1 = guard.admit("10.0.0.1", "10.0.0.1:1", _never)
        a2 = guard.admit("10.0.0.1", "10.0.0.1:2", _never)
        assert a1 is not None and a2 is not None
        assert guard.admit("10.0.0.1", "10.0.0.1:3", _never) is None  # per address
        b1 = guard.admit("10.0.0.2", "10.0.0.2:1", _never)
        assert b1 is not None
        assert guard.admit("10.0.0.3", "10.0.0.3:1", _never) is None  # in total
        assert (guard.pending(), guard.pending("10.0.0.1")) == (3, 2)
        a1.done()
        a1.done()  # a second time changes nothing
        assert (guard.pending(), guard.pending("10.0.0.1")) == (2, 1)
        again = guard.admit("10.0.0.3", "10.0.0.3:2", _never)
        assert again is not None
        for pending in (a2, b1, again):
            pending.done()
        assert guard.pending() == 0 and guard.pending("10.0.0.1") == 0

    asyncio.run(scenario())


def test_the_deadline_runs_from_admission_and_a_finished_login_has_none() -> None:
    async def scenario() -> None:
        guard = LoginGuard(timeout=0.05, max_pending=8, max_per_address=8)
        expired: list[PendingLogin] = []
        last = asyncio.Event()

        def expire_last(pending: PendingLogin) -> None:
            expired.append(pending)
            last.set()

        finished = guard.admit("10.0.0.1", "10.0.0.1:1", expired.append)  # due first
        late = guard.admit("10.0.0.1", "10.0.0.1:2", expire_last)
        assert late is not None and finished is not None
        finished.done()
        await asyncio.wait_for(last.wait(), 5)
        assert expired == [late]
        assert late.elapsed() >= 0.05

    asyncio.run(scenario())
