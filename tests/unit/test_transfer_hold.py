"""The hold: REGISTER and RESERVE in one round trip, judged against the reservations
read beside them and taken back where the copy is refused, and the fallback for targets that
let only the reserving session write (LIO): the write that finds out without changing
the LUN, and the registration-only hold that follows. The sessions are stand-ins
recording the commands they are sent; the real targets are in
tests/integration/test_copy_trust.py (ours) and tests/vm/test_lio_backend.py (LIO)."""

from __future__ import annotations

import asyncio
import struct
from typing import cast

import pytest

from reservoir.agent.initiator import WRITE_EXCLUSIVE_REGISTRANTS_ONLY, ScsiError, Session
from reservoir.agent.transfer._hold import (
    HoldError,
    PrState,
    claim,
    hold_by_registration,
    register_and_reserve,
    settle,
    unclaim,
    writes_allowed,
)

KEY = 0x1234_5678_9ABC_DEF0
RELEASE = 0x02
ILLEGAL_REQUEST = 0x05


class RecordingSession:
    """Answers every command with ``status`` (GOOD: 0) and keeps what it was sent."""

    def __init__(self, status: int = 0, sense_key: int = 0) -> None:
        self.status = status
        self.sense = bytes([0x70, 0, sense_key]) + bytes(15) if sense_key else b""
        self.sent: list[tuple[bytes, bytes]] = []

    async def scsi(self, lun: int, cdb: bytes, data_out: bytes = b"", **_: object) -> None:
        self.sent.append((cdb, bytes(data_out)))
        if self.status:
            raise ScsiError(self.status, self.sense)


def _as_session(fake: object) -> Session:
    return cast(Session, fake)


def test_the_probe_is_a_compare_and_write_that_cannot_change_the_block() -> None:
    fake = RecordingSession()
    assert asyncio.run(writes_allowed(_as_session(fake), 3, 4096))
    [(cdb, data)] = fake.sent
    assert cdb[0] == 0x89 and struct.unpack(">Q", cdb[2:10]) == (0,) and cdb[13] == 1
    assert data == bytes(8192)  # compare and write halves alike: zeros for zeros


def test_a_miscompare_says_the_session_may_write() -> None:
    fake = RecordingSession(status=0x02, sense_key=0x0E)
    assert asyncio.run(writes_allowed(_as_session(fake), 0, 512))


def test_a_reservation_conflict_says_it_may_not() -> None:
    fake = RecordingSession(status=0x18)
    assert not asyncio.run(writes_allowed(_as_session(fake), 0, 512))


def test_another_failure_of_the_probe_is_raised() -> None:
    with pytest.raises(ScsiError):
        fake = RecordingSession(status=0x02, sense_key=0x03)  # medium error
        asyncio.run(writes_allowed(_as_session(fake), 0, 512))


def test_the_fallback_is_a_release_by_the_holder_that_keeps_the_registrations() -> None:
    holder = RecordingSession()
    asyncio.run(hold_by_registration(_as_session(holder), 0, KEY, "lun"))
    [(cdb, data)] = holder.sent
    assert cdb[:3] == bytes([0x5F, RELEASE, 0x05])  # Write Exclusive - Registrants Only
    assert data[:8] == KEY.to_bytes(8, "big")


RESERVE, REGISTER_AND_IGNORE = 0x01, 0x06


class PipelineSession:
    """Answers a command only once ``together`` commands have been sent (so a caller
    that waits for one answer before sending the next never gets one); the RESERVEs
    numbered in ``conflicts`` (0 = the first) get RESERVATION CONFLICT."""

    def __init__(self, together: int, conflicts: tuple[int, ...] = ()) -> None:
        self.sent: list[int] = []  # service actions
        self.together, self.conflicts = together, conflicts
        self.all_in = asyncio.Event()
        self.reserves = 0

    async def scsi(self, lun: int, cdb: bytes, data_out: bytes = b"", **_: object) -> None:
        self.sent.append(cdb[1])
        if len(self.sent) >= self.together:
            self.all_in.set()
        await asyncio.wait_for(self.all_in.wait(), 1.0)
        if cdb[1] == RESERVE:
            self.reserves += 1
            if self.reserves - 1 in self.conflicts:
                raise ScsiError(0x18, b"")


def test_register_and_reserve_leave_together_in_one_round_trip() -> None:
    fake = PipelineSession(together=2)
    assert asyncio.run(register_and_reserve(_as_session(fake), 0, KEY))
    assert fake.sent == [REGISTER_AND_IGNORE, RESERVE]


def test_a_reserve_the_target_ran_before_the_register_is_sent_again() -> None:
    fake = PipelineSession(together=2, conflicts=(0,))
    assert asyncio.run(register_and_reserve(_as_session(fake), 0, KEY))
    assert fake.sent == [REGISTER_AND_IGNORE, RESERVE, RESERVE]


def test_a_reserve_that_conflicts_once_registered_is_held_by_another_nexus() -> None:
    fake = PipelineSession(together=2, conflicts=(0, 1))
    assert not asyncio.run(register_and_reserve(_as_session(fake), 0, KEY))
    assert fake.sent == [REGISTER_AND_IGNORE, RESERVE, RESERVE]


def test_the_claim_of_a_target_without_persistent_reservations_is_none() -> None:
    fake = RecordingSession(status=0x02, sense_key=ILLEGAL_REQUEST)
    assert asyncio.run(claim(_as_session(fake), 0, KEY)) is None


OURS = (KEY, WRITE_EXCLUSIVE_REGISTRANTS_ONLY)


@pytest.mark.parametrize(
    "read",
    [PrState(), PrState(reservation=OURS, keys=[KEY])],
    ids=["read-before-the-claim", "read-after-it"],
)
def test_a_claim_that_reserved_is_a_fresh_hold_whenever_the_read_ran(read: PrState) -> None:
    assert settle(read, KEY, True, "the LUN") is False  # not a resume


def test_a_claim_that_met_this_copys_reservation_is_a_resume() -> None:
    assert settle(PrState(reservation=OURS, keys=[KEY]), KEY, False, "the LUN") is True


@pytest.mark.parametrize(
    ("read", "reserved"),
    [
        (PrState(reservation=(7, WRITE_EXCLUSIVE_REGISTRANTS_ONLY), keys=[7]), False),
        (PrState(keys=[7]), True),  # registered, not reserved: the claim got the reservation
        (PrState(), False),  # reserved by someone after the read
    ],
    ids=["reserved-by-another", "registered-by-another", "reserved-after-the-read"],
)
def test_a_claim_on_a_lun_someone_else_holds_is_refused(read: PrState, reserved: bool) -> None:
    with pytest.raises(HoldError, match=r"another initiator|other initiators"):
        settle(read, KEY, reserved, "the LUN")


class Unregistering:
    """Records when it is asked to unregister (REGISTER AND IGNORE with key 0)."""

    def __init__(self, name: str, log: list[str], fails: bool = False) -> None:
        self.name, self.log, self.fails = name, log, fails

    async def scsi(self, lun: int, cdb: bytes, data_out: bytes = b"", **_: object) -> None:
        assert cdb[1] == REGISTER_AND_IGNORE and data_out[8:16] == bytes(8)
        await asyncio.sleep(0.01 if self.name == "holder" else 0)
        if self.fails:
            raise ScsiError(0x02, bytes([0x70, 0, 0x04]) + bytes(15))
        self.log.append(self.name)


def test_unclaim_unregisters_every_session_and_the_holder_last() -> None:
    log: list[str] = []
    holder, a, b = (Unregistering(n, log) for n in ("holder", "a", "b"))
    sessions = [_as_session(x) for x in (holder, a, b)]
    done = asyncio.run(unclaim(sessions, sessions[0], 0))
    assert log == ["a", "b", "holder"] and set(done) == set(sessions)


def test_unclaim_of_a_resumed_copy_leaves_the_earlier_runs_hold() -> None:
    log: list[str] = []
    mine = [_as_session(Unregistering(n, log)) for n in ("a", "b")]
    assert asyncio.run(unclaim(mine, None, 0)) == mine and log == ["a", "b"]


def test_a_registration_that_could_not_be_taken_back_is_not_counted_as_gone() -> None:
    log: list[str] = []
    ok, failing = Unregistering("a", log), Unregistering("b", log, fails=True)
    sessions = [_as_session(ok), _as_session(failing)]
    assert asyncio.run(unclaim(sessions, None, 0)) == [sessions[0]]
