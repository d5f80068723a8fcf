"""The hold: REGISTER and RESERVE in one round trip, and the fallback for targets that
let only the reserving session write (LIO): the write that finds out without changing
the LUN, and the registration-only hold that follows. The sessions are stand-ins
recording the commands they are sent; the real targets are in
tests/integration/test_copy_trust.py (ours) and tests/vm/test_lio_backend.py (LIO)."""

from __future__ import annotations

import asyncio
import struct
from typing import cast

import pytest

from reservoir.agent.initiator import ScsiError, Session
from reservoir.agent.transfer._hold import (
    hold_by_registration,
    register_and_reserve,
    writes_allowed,
)

KEY = 0x1234_5678_9ABC_DEF0
RELEASE = 0x02


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
    asyncio.run(register_and_reserve(_as_session(fake), 0, KEY))
    assert fake.sent == [REGISTER_AND_IGNORE, RESERVE]


def test_a_reserve_the_target_ran_before_the_register_is_sent_again() -> None:
    fake = PipelineSession(together=2, conflicts=(0,))
    asyncio.run(register_and_reserve(_as_session(fake), 0, KEY))
    assert fake.sent == [REGISTER_AND_IGNORE, RESERVE, RESERVE]


def test_a_reserve_that_conflicts_once_registered_is_someone_elses_reservation() -> None:
    fake = PipelineSession(together=2, conflicts=(0, 1))
    with pytest.raises(ScsiError) as caught:
        asyncio.run(register_and_reserve(_as_session(fake), 0, KEY))
    assert caught.value.status == 0x18 and fake.sent == [REGISTER_AND_IGNORE, RESERVE, RESERVE]
