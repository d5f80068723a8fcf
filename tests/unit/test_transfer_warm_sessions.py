"""A copy's remote side with a pool of warm sessions: it takes its sessions from the
pool and gives back only those that carry nothing of the copy (fake sessions)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

from fake_sessions import FakeSession

from reservoir.agent.initiator import Session, SessionKey, SessionPool
from reservoir.agent.transfer._endpoints import Login, RemoteChannel, RemoteLun, RemoteSide

IQN = "iqn.2026-11.org.reservoir:warm"
ME = "iqn.2026-11.org.reservoir:unit"
LUN = RemoteLun("10.0.1.2", 3260, IQN, 0)
KEY = SessionKey("10.0.1.2", 3260, IQN, ME)  # what the side's sessions without a path are
HOLD = 0x1234
PR_OUT = 0x5F


Test = Callable[[SessionPool[Session], RemoteSide, FakeSession], Awaitable[None]]


def run(test: Test, *, destination: bool = True) -> None:
    """``test`` with a side whose pool holds one warm session of its path."""

    async def main() -> None:
        pool: SessionPool[Session] = SessionPool()
        warm = FakeSession("warm")
        await pool.put(KEY, cast(Session, warm))
        side = RemoteSide(LUN, Login(ME, pool=pool), "the LUN", destination=destination)
        try:
            await test(pool, side, warm)
        finally:
            await pool.close()

    asyncio.run(main())


def test_a_stream_takes_the_warm_session_of_its_path() -> None:
    async def test(pool: SessionPool[Session], side: RemoteSide, warm: FakeSession) -> None:
        channel = await side.channel(0, None)
        assert isinstance(channel, RemoteChannel)
        assert channel.session is cast(Session, warm)
        assert (side.opened, side.reused) == (0, 1)

    run(test)


def test_a_copy_that_released_its_hold_gives_its_sessions_back() -> None:
    async def test(pool: SessionPool[Session], side: RemoteSide, warm: FakeSession) -> None:
        side.hold = HOLD
        channel = await side.channel(0, None)
        assert warm.cdbs[0][0] == PR_OUT  # registered under the copy's key
        await channel.release()  # CLEAR: every registration of the LUN goes
        await channel.close()
        await side.close()
        assert warm.logouts == 0
        assert pool.take(KEY) is cast(Session, warm)

    run(test)


def test_a_session_registered_under_a_hold_that_stays_is_logged_out() -> None:
    async def test(pool: SessionPool[Session], side: RemoteSide, warm: FakeSession) -> None:
        side.hold = HOLD
        channel = await side.channel(0, None)
        await channel.close()  # paused or failed: the hold stays for the resume
        await side.close()
        assert warm.logouts == 1
        assert pool.take(KEY) is None

    run(test)


def test_the_sessions_of_a_side_without_a_hold_go_back() -> None:
    async def test(pool: SessionPool[Session], side: RemoteSide, warm: FakeSession) -> None:
        channel = await side.channel(0, None)
        await channel.close()
        await channel.close()  # twice (the engine may): given back once
        assert warm.logouts == 0 and pool.take(KEY) is None  # not before the side closes
        await side.close()
        assert pool.take(KEY) is cast(Session, warm) and pool.take(KEY) is None

    run(test, destination=False)


def test_a_session_with_a_command_outstanding_is_logged_out() -> None:
    async def test(pool: SessionPool[Session], side: RemoteSide, warm: FakeSession) -> None:
        channel = await side.channel(0, None)
        warm.busy = True  # a copy stopped with a command in flight
        await channel.close()
        await side.close()
        assert warm.logouts == 1 and pool.take(KEY) is None

    run(test, destination=False)


def test_the_session_of_a_dropped_channel_is_logged_out() -> None:
    async def test(pool: SessionPool[Session], side: RemoteSide, warm: FakeSession) -> None:
        channel = await side.channel(0, None)
        assert isinstance(channel, RemoteChannel)
        channel.drop()  # its path failed
        await channel.close()
        await side.close()
        assert warm.transport is not None and warm.transport.dropped
        assert warm.logouts == 1 and pool.take(KEY) is None

    run(test, destination=False)


def test_without_a_pool_a_channel_logs_its_session_out_when_it_closes() -> None:
    async def main() -> None:
        session = FakeSession()
        await RemoteChannel(cast(Session, session), 0, 512).close()
        assert session.logouts == 1

    asyncio.run(main())


def test_the_next_copy_probes_on_the_session_its_clear_left_no_unit_attention() -> None:
    """CLEAR gives every other registered session a unit attention, which costs the
    next command on it a round trip (it is sent again): the sessions go back to the
    pool marked, and the next copy probes on the one that sent the CLEAR."""

    async def main() -> None:
        pool: SessionPool[Session] = SessionPool()
        clearer, other = FakeSession("clearer"), FakeSession("other")
        for fake in (other, clearer):  # the last given back is taken first
            await pool.put(KEY, cast(Session, fake))
        side = RemoteSide(LUN, Login(ME, pool=pool), "the LUN", destination=True)
        side.hold = HOLD
        try:
            first, second = [await side.channel(i, None) for i in range(2)]
            assert isinstance(first, RemoteChannel) and first.session is cast(Session, clearer)
            await first.release()
            for channel in (first, second):
                await channel.close()
            await side.close()
            assert other.attention_expected and not clearer.attention_expected
            assert pool.stats().idle == 2
            after = RemoteSide(LUN, Login(ME, pool=pool), "the LUN", destination=True)
            after.open_early({0: None, 1: None})  # both warm: in at once
            assert await after._first_early() is cast(Session, clearer)  # the prober
            await after.close()
        finally:
            await pool.close()

    asyncio.run(main())
