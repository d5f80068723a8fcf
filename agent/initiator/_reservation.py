"""PERSISTENT RESERVE IN and OUT from the initiator's side (SPC-4 6.15, 6.16).

A copy holds its destination with a *Write Exclusive - Registrants Only* reservation:
every stream's session (an I_T nexus of its own) registers the copy's key, one of them
reserves, and initiators that did not register get RESERVATION CONFLICT on writes.
Registrations outlive their connection, so a resumed copy registers its new sessions
with the same key and finds its reservation still in place.
"""

from __future__ import annotations

import struct

from reservoir.agent.initiator._errors import ProtocolError
from reservoir.agent.initiator._session import Session

__all__ = [
    "WRITE_EXCLUSIVE_REGISTRANTS_ONLY",
    "pr_clear",
    "pr_read_keys",
    "pr_read_reservation",
    "pr_register",
    "pr_release",
    "pr_reserve",
    "pr_unregister",
]

PR_IN, PR_OUT = 0x5E, 0x5F
READ_KEYS, READ_RESERVATION = 0x00, 0x01
RESERVE, RELEASE, CLEAR, REGISTER_AND_IGNORE = 0x01, 0x02, 0x03, 0x06
WRITE_EXCLUSIVE_REGISTRANTS_ONLY = 5
PARAMETERS = 24
IN_LENGTH = 8 + 8 * 64  # header and 64 keys


def _out(action: int, key: int, action_key: int = 0, pr_type: int = 0) -> tuple[bytes, bytes]:
    cdb = struct.pack(">BBBHIB", PR_OUT, action, pr_type, 0, PARAMETERS, 0)
    return cdb, struct.pack(">QQ8x", key, action_key)


def _in(action: int) -> bytes:
    return struct.pack(">BB5xHB", PR_IN, action, IN_LENGTH, 0)


async def pr_register(session: Session, lun: int, key: int) -> None:
    """Registers this session's I_T nexus with ``key`` (REGISTER AND IGNORE EXISTING KEY)."""
    cdb, params = _out(REGISTER_AND_IGNORE, 0, key)
    await session.scsi(lun, cdb, data_out=params)


async def pr_unregister(session: Session, lun: int) -> None:
    """Removes this session's registration (REGISTER AND IGNORE EXISTING KEY with a
    service action key of 0); a holder's reservation goes with it (SPC-4 5.14.11.2.3)."""
    cdb, params = _out(REGISTER_AND_IGNORE, 0, 0)
    await session.scsi(lun, cdb, data_out=params)


async def pr_reserve(session: Session, lun: int, key: int, pr_type: int) -> None:
    cdb, params = _out(RESERVE, key, pr_type=pr_type)
    await session.scsi(lun, cdb, data_out=params)


async def pr_release(session: Session, lun: int, key: int, pr_type: int) -> None:
    """Releases the reservation this session's nexus holds; registrations stay."""
    cdb, params = _out(RELEASE, key, pr_type=pr_type)
    await session.scsi(lun, cdb, data_out=params)


async def pr_clear(session: Session, lun: int, key: int) -> None:
    """Releases the reservation and removes every registration (the session's nexus
    must be registered with ``key``)."""
    cdb, params = _out(CLEAR, key)
    await session.scsi(lun, cdb, data_out=params)


async def pr_read_keys(session: Session, lun: int) -> list[int]:
    data = (await session.scsi(lun, _in(READ_KEYS), read_length=IN_LENGTH)).data
    if len(data) < 8:
        raise ProtocolError(f"READ KEYS returned {len(data)} bytes")
    length = min(int.from_bytes(data[4:8], "big"), len(data) - 8)
    return [int.from_bytes(data[8 + i : 16 + i], "big") for i in range(0, length - 7, 8)]


async def pr_read_reservation(session: Session, lun: int) -> tuple[int, int] | None:
    """(key, type) of the LUN's persistent reservation, or None."""
    data = (await session.scsi(lun, _in(READ_RESERVATION), read_length=IN_LENGTH)).data
    if len(data) < 8:
        raise ProtocolError(f"READ RESERVATION returned {len(data)} bytes")
    if int.from_bytes(data[4:8], "big") < 16 or len(data) < 24:
        return None
    return int.from_bytes(data[8:16], "big"), data[21] & 0x0F
