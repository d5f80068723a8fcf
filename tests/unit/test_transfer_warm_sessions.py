"""A copy's remote side with a pool of warm sessions: it takes its sessions from the
pool and gives back only those that carry nothing of the copy (fake sessions)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

import pytest
from fake_sessions import FakeSession

from reservoir.agent.initiator import ScsiReply, Session, SessionKey, SessionPool
from reservoir.agent.initiator._hash_range import SUPPORTED, VENDOR
from reservoir.agent.scsi import HASH_RANGE_OPCODE
from reservoir.agent.transfer._endpoints import Login, RemoteChannel, RemoteLun, RemoteSide

IQN = "iqn.2026-11.org.reservoir:warm"
ME = "iqn.2026-11.org.reservoir:unit"
LUN = RemoteLun("10.0.1.2", 3260, IQN, 0)
KEY = SessionKey("10.0.1.2", 3260, IQN, ME)  # what the side's sessions without a path are
HOLD = 0x1234
PR_IN, PR_OUT = 0x5E, 0x5F
INQUIRY, REPORT_SUPPORTED_OPCODES = 0x12, 0xA3


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


class Rounds:
    """A network whose answers all arrive together: commands sent while the others
    wait are in one round trip; :meth:`drive` answers them and counts the rounds."""

    def __init__(self) -> None:
        self.round = 0
        self.waiting: list[asyncio.Future[None]] = []

    async def drive(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        while not task.done():
            for _ in range(50):  # everything that can be sent now is sent
                await asyncio.sleep(0)
            waiting, self.waiting = self.waiting, []
            for future in waiting:
                future.set_result(None)
            self.round += bool(waiting)
        await task


def _our_targets_answer(cdb: bytes, length: int) -> bytes:
    """What our target says to the probe (its vendor, HASH RANGE supported, a VPD page
    without designators); zeros to the rest (no reservation, no keys)."""
    if cdb[0] == INQUIRY and cdb[1] & 1:
        data = bytes([0, cdb[2]])
    elif cdb[0] == INQUIRY:
        data = bytes(8) + VENDOR
    elif cdb[0] == REPORT_SUPPORTED_OPCODES:
        data = bytes([0, SUPPORTED])
    else:
        data = b""
    return data.ljust(length, b"\0")[:length]


class RoundSession(FakeSession):
    """A warm session whose commands are answered when :class:`Rounds` says."""

    def __init__(self, name: str, rounds: Rounds) -> None:
        super().__init__(name)
        self.rounds = rounds
        self.sent: list[tuple[int, int]] = []  # (round, operation code)

    async def scsi(
        self,
        lun: int,
        cdb: bytes,
        data_out: bytes | memoryview = b"",
        read_length: int = 0,
        timeout: float | None = None,
    ) -> ScsiReply:
        self.sent.append((self.rounds.round, cdb[0]))
        answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.rounds.waiting.append(answer)
        await answer
        await super().scsi(lun, cdb, data_out, read_length, timeout)
        return ScsiReply(0, _our_targets_answer(cdb, read_length), b"")

    async def capacity(self, lun: int) -> tuple[int, int]:
        await self.scsi(lun, bytes([0x9E, 0x10]) + bytes(14), read_length=32)
        return 1 << 20, 512


def test_a_destination_is_probed_and_held_in_one_round_trip_its_streams_ready_to_write() -> None:
    """On warm sessions the probe, the reservation and every other stream's
    registration leave together: after one round trip the LUN is held and each
    stream's session may write, with no command more."""

    async def main() -> None:
        rounds, pool = Rounds(), SessionPool[Session]()
        warm = [RoundSession(f"warm{i}", rounds) for i in range(3)]
        for fake in warm:
            await pool.put(KEY, cast(Session, fake))
        side = RemoteSide(LUN, Login(ME, pool=pool), "the LUN", destination=True)
        side.open_early({i: None for i in range(3)})
        await rounds.drive(side.probe(HOLD))
        assert rounds.round == 1
        assert {code for fake in warm for _, code in fake.sent} >= {PR_IN, PR_OUT}
        sent = sum(len(fake.sent) for fake in warm)
        await side.settle_hold()  # judged from what the probe read: nothing to send
        assert side.hold == HOLD
        channels = [await side.channel(i, None) for i in range(3)]
        assert sum(len(fake.sent) for fake in warm) == sent  # nothing more before a write
        assert {cast(RemoteChannel, c).session for c in channels} == {
            cast(Session, f) for f in warm
        }
        await pool.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_receipt_copy_arms_them_with_its_probe_once_its_sessions_know_the_target() -> None:
    """Receipts are armed by a vendor-specific command, sent only to a target known to
    be ours: a cold copy learns that from its probe and arms them in a second round
    trip, and every session it gives back keeps what it learned; the next copy arms
    them beside the probe, in one."""

    async def main() -> None:
        rounds, pool = Rounds(), SessionPool[Session]()
        warm = [RoundSession(f"warm{i}", rounds) for i in range(2)]
        for fake in warm:
            await pool.put(KEY, cast(Session, fake))

        async def copy_start() -> tuple[int, list[int]]:
            """The rounds of a receipt copy's start, and those HASH RANGE went in."""
            before, sent_before = rounds.round, [len(f.sent) for f in warm]
            side = RemoteSide(LUN, Login(ME, pool=pool), "the LUN", destination=False)
            side.open_early({0: None, 1: None})
            await rounds.drive(side.probe(receipts=True))
            await rounds.drive(side.arm_receipts())
            sent = [e for f, n in zip(warm, sent_before, strict=True) for e in f.sent[n:]]
            await side.close()
            armed_in = sorted(r - before for r, code in sent if code == HASH_RANGE_OPCODE)
            return rounds.round - before, armed_in

        assert await copy_start() == (2, [1])  # learned from the probe: armed after it
        assert all(fake.learned == {("hash range", LUN.lun): True} for fake in warm)
        assert await copy_start() == (1, [0])  # with the probe
        await pool.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_session_that_does_not_know_the_target_is_ours_sends_it_no_vendor_command() -> None:
    """A session that learned over its login that the target is *not* ours (a probe
    found another vendor's), or never asked, arms nothing with its probe."""

    async def main() -> None:
        rounds, pool = Rounds(), SessionPool[Session]()
        fake = RoundSession("warm", rounds)
        fake.learned[("hash range", LUN.lun)] = False
        await pool.put(KEY, cast(Session, fake))
        side = RemoteSide(LUN, Login(ME, pool=pool), "the LUN", destination=False)
        side.open_early({0: None})
        await rounds.drive(side.probe(receipts=True))
        assert HASH_RANGE_OPCODE not in [code for _, code in fake.sent]
        await side.close()
        await pool.close()

    asyncio.run(asyncio.wait_for(main(), 10))


@pytest.mark.parametrize("again", [0, 1], ids=["kept-its-login", "logged-in-again"])
def test_a_session_that_logged_in_again_during_the_copy_goes_back_knowing_nothing(
    again: int,
) -> None:
    """A reinstated session may have reached another target at the same address: the
    side does not tell it the target is ours when it gives it back."""

    async def test(pool: SessionPool[Session], side: RemoteSide, warm: FakeSession) -> None:
        side.hashes = True  # as the probe found
        channel = await side.channel(0, None)
        warm.reinstatements = again
        await channel.close()
        await side.close()
        assert pool.take(KEY) is cast(Session, warm)
        assert warm.learned == ({} if again else {("hash range", LUN.lun): True})

    run(test, destination=False)


def late_logins(sessions: list[RoundSession]) -> Callable[..., Awaitable[Session]]:
    """An ``_open`` whose first session is in at once and the others a little later,
    within the round trip the probe takes (logins that finished while it was out)."""
    queue = list(sessions)

    async def open_session(*args: object, **kw: object) -> Session:
        session = queue.pop(0)
        if session is not sessions[0]:
            for _step in range(5):
                await asyncio.sleep(0)
        return cast(Session, session)

    return open_session


def test_sessions_that_log_in_while_the_probe_is_out_register_then_not_a_round_trip_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cold copy probes on its first session to log in; the others that log in
    while the probe is out register at once, beside it, so every stream may write
    once the probe is answered (they registered only when their stream took them,
    one round trip later)."""

    async def main() -> None:
        rounds = Rounds()
        fakes = [RoundSession(f"cold{i}", rounds) for i in range(3)]
        side = RemoteSide(LUN, Login(ME), "the LUN", destination=True)
        monkeypatch.setattr(side, "_open", late_logins(fakes))
        side.open_early({i: None for i in range(3)})

        async def start() -> None:
            await side.probe(HOLD)
            await side.settle_hold()
            for i in range(3):
                await side.channel(i, None)

        await rounds.drive(start())
        assert side.hold == HOLD
        assert rounds.round == 1
        for late in fakes[1:]:
            assert late.sent == [(0, PR_OUT)]  # its REGISTER, beside the probe

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_refused_copy_takes_back_the_registration_of_a_session_that_logged_in_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session that registered once it was in is unregistered with the others when
    the copy is refused; one still logging in then registers nothing."""

    async def main() -> None:
        rounds = Rounds()
        fakes = [RoundSession(f"cold{i}", rounds) for i in range(3)]
        side = RemoteSide(LUN, Login(ME), "the LUN", destination=True)
        opened = late_logins(fakes[:2])
        never: asyncio.Future[Session] = asyncio.get_running_loop().create_future()
        calls = [0]

        async def open_session(*args: object, **kw: object) -> Session:
            calls[0] += 1
            return await opened() if calls[0] <= 2 else await never  # the third hangs

        monkeypatch.setattr(side, "_open", open_session)
        side.open_early({i: None for i in range(3)})
        await rounds.drive(side.probe(HOLD))
        await rounds.drive(side.unclaim())
        late = fakes[1]
        assert [code for _, code in late.sent] == [PR_OUT, PR_OUT]  # registered, taken back
        assert not fakes[2].sent
        never.set_exception(OSError("no route"))  # its login fails: nothing to wait for
        await side.close()

    asyncio.run(asyncio.wait_for(main(), 10))
