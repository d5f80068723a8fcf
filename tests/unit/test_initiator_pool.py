"""The pool of warm sessions: reuse by key, bounds, idle timeout, pings, refusals."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fake_sessions import FakeSession

from reservoir.agent.initiator import (
    PoolSettings,
    SessionKey,
    SessionPool,
    chap_identity,
)

IQN = "iqn.2026-11.org.reservoir:pool"
ME = "iqn.2026-11.org.reservoir:unit"
PATH_1 = SessionKey("10.0.1.2", 3260, IQN, ME, local_address="10.0.1.1")
PATH_2 = SessionKey("10.0.2.2", 3260, IQN, ME, local_address="10.0.2.1")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run(test: Callable[[SessionPool[FakeSession], Clock], Awaitable[None]], **kw: float) -> None:
    """``test`` with a pool on a clock of its own (``kw``: PoolSettings), closed after."""

    async def main() -> None:
        clock = Clock()
        pool: SessionPool[FakeSession] = SessionPool(PoolSettings(**kw), clock)  # type: ignore[arg-type]
        try:
            await test(pool, clock)
        finally:
            await pool.close()

    asyncio.run(main())


def test_a_session_given_back_is_taken_again_under_its_key() -> None:
    async def test(pool: SessionPool[FakeSession], clock: Clock) -> None:
        session = FakeSession()
        assert await pool.put(PATH_1, session)
        assert pool.take(PATH_1) is session
        assert pool.take(PATH_1) is None  # taken: not handed out twice
        assert session.logouts == 0
        assert pool.stats().taken == 1 and pool.stats().idle == 0

    run(test)


def test_no_session_is_taken_under_another_key() -> None:
    others = [
        PATH_2,  # another path
        SessionKey("10.0.1.2", 3260, IQN, ME, local_address=None),  # no bind
        SessionKey("10.0.1.2", 3261, IQN, ME, local_address="10.0.1.1"),  # another port
        SessionKey("10.0.1.2", 3260, IQN + "b", ME, local_address="10.0.1.1"),  # target
        SessionKey("10.0.1.2", 3260, IQN, ME + "b", local_address="10.0.1.1"),  # initiator
        SessionKey("10.0.1.2", 3260, IQN, ME, chap_identity(("u", "s"), None), "10.0.1.1"),
        SessionKey("10.0.1.2", 3260, IQN, ME, local_address="10.0.1.1", transport="mptcp"),
        SessionKey("10.0.1.2", 3260, IQN, ME, local_address="10.0.1.1", transport="tcp/cubic"),
    ]

    async def test(pool: SessionPool[FakeSession], clock: Clock) -> None:
        await pool.put(PATH_1, FakeSession())
        assert [pool.take(key) for key in others] == [None] * len(others)
        assert pool.take(PATH_1) is not None

    run(test)


def test_chap_identity_tells_users_and_secrets_apart() -> None:
    assert chap_identity(None, None) == ""
    one = chap_identity(("copier", "secret-1"), None)
    assert one == chap_identity(("copier", "secret-1"), None)
    assert one != chap_identity(("copier", "secret-2"), None)
    assert one != chap_identity(("other", "secret-1"), None)
    assert one != chap_identity(("copier", "secret-1"), ("target", "t-secret"))
    assert "secret-1" not in one


def test_the_session_given_back_last_is_taken_first() -> None:
    async def test(pool: SessionPool[FakeSession], clock: Clock) -> None:
        first, last = FakeSession("first"), FakeSession("last")
        await pool.put(PATH_1, first)
        clock.now += 1
        await pool.put(PATH_1, last)
        assert pool.take(PATH_1) is last
        assert pool.take(PATH_1) is first

    run(test)


def test_beyond_the_bound_of_a_path_the_longest_idle_is_logged_out() -> None:
    async def test(pool: SessionPool[FakeSession], clock: Clock) -> None:
        sessions = [FakeSession(str(i)) for i in range(3)]
        for session in sessions:
            await pool.put(PATH_1, session)
            clock.now += 1
        assert [s.logouts for s in sessions] == [1, 0, 0]
        assert pool.stats().evicted == 1 and pool.stats().idle == 2

    run(test, per_key=2)


def test_beyond_the_total_bound_the_longest_idle_of_all_is_logged_out() -> None:
    async def test(pool: SessionPool[FakeSession], clock: Clock) -> None:
        old, middle, new = FakeSession("old"), FakeSession("middle"), FakeSession("new")
        await pool.put(PATH_2, old)
        clock.now += 1
        await pool.put(PATH_1, middle)
        clock.now += 1
        await pool.put(PATH_1, new)
        assert (old.logouts, middle.logouts, new.logouts) == (1, 0, 0)
        assert pool.take(PATH_2) is None

    run(test, per_key=8, total=2)


def test_a_session_idle_past_the_timeout_is_logged_out() -> None:
    async def test(pool: SessionPool[FakeSession], clock: Clock) -> None:
        old, recent = FakeSession("old"), FakeSession("recent")
        await pool.put(PATH_1, old)
        clock.now += 50
        await pool.put(PATH_2, recent)
        clock.now += 11
        await pool.sweep()
        assert old.logouts == 1 and recent.logouts == 0
        assert pool.take(PATH_1) is None and pool.take(PATH_2) is recent
        assert pool.stats().expired == 1

    run(test, idle_timeout=60)


def test_idle_sessions_are_pinged_and_one_that_does_not_answer_is_logged_out() -> None:
    async def test(pool: SessionPool[FakeSession], clock: Clock) -> None:
        alive, silent = FakeSession("alive"), FakeSession("silent", answers=False)
        await pool.put(PATH_1, alive)
        await pool.put(PATH_2, silent)
        await pool.sweep()
        assert alive.pings == 1 and silent.pings == 1
        assert silent.logouts == 1 and alive.logouts == 0
        assert pool.take(PATH_2) is None and pool.take(PATH_1) is alive
        assert pool.stats().ping_failed == 1

    run(test)


def test_the_pool_pings_by_itself_every_interval() -> None:
    async def test(pool: SessionPool[FakeSession], clock: Clock) -> None:
        session = FakeSession()
        await pool.put(PATH_1, session)
        await asyncio.sleep(0.05)
        assert session.pings >= 2 and session.logouts == 0

    run(test, ping_interval=0.01)


def test_a_session_that_is_not_reusable_is_logged_out_not_kept() -> None:
    async def test(pool: SessionPool[FakeSession], clock: Clock) -> None:
        busy, lost = FakeSession("busy"), FakeSession("lost")
        busy.busy = True  # a command still outstanding
        lost.connected = False
        assert not await pool.put(PATH_1, busy)
        assert not await pool.put(PATH_1, lost)
        assert busy.logouts == 1 and lost.logouts == 1
        assert pool.take(PATH_1) is None and pool.stats().refused == 2

    run(test)


def test_a_session_whose_connection_dropped_while_idle_is_not_handed_out() -> None:
    async def test(pool: SessionPool[FakeSession], clock: Clock) -> None:
        good, dropped = FakeSession("good"), FakeSession("dropped")
        await pool.put(PATH_1, good)
        await pool.put(PATH_1, dropped)
        dropped.connected = False  # reconnecting, say
        assert pool.take(PATH_1) is good
        await asyncio.sleep(0)  # its logout runs in the background
        assert dropped.logouts == 1

    run(test)


def test_closing_logs_out_idle_sessions_and_any_given_back_later() -> None:
    async def test(pool: SessionPool[FakeSession], clock: Clock) -> None:
        idle, late = FakeSession("idle"), FakeSession("late")
        await pool.put(PATH_1, idle)
        await pool.close()
        assert idle.logouts == 1
        assert not await pool.put(PATH_1, late)
        assert late.logouts == 1 and pool.take(PATH_1) is None

    run(test)
