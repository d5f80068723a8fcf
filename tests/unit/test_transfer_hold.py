"""The hold's fallback for targets that let only the reserving session write (LIO):
the write that finds out without changing the LUN, and the registration-only hold that follows. The
sessions are stand-ins recording the commands they are sent; the real targets are in
tests/integration/test_copy_trust.py (ours) and tests/vm/test_lio_backend.py (LIO)."""

from __future__ import annotations

import asyncio
import struct
from typing import cast

import pytest

from reservoir.agent.initiator import ScsiError, Session
from reservoir.agent.transfer._hold import hold_by_registration, writes_allowed

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


def _as_session(fake: RecordingSession) -> Session:
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
