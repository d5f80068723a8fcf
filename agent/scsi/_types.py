"""The values that cross the boundary between the transport and the SCSI layer.

SAM-5 models a command as a CDB, an I_T nexus, a Data-Out buffer and an
allocation for Data-In; the result is a status byte, Data-In and sense data.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol


class Status(IntEnum):
    """SAM-5 5.3 status codes."""

    GOOD = 0x00
    CHECK_CONDITION = 0x02
    CONDITION_MET = 0x04
    BUSY = 0x08
    RESERVATION_CONFLICT = 0x18
    TASK_SET_FULL = 0x28
    ACA_ACTIVE = 0x30
    TASK_ABORTED = 0x40


@dataclass(frozen=True, slots=True)
class Nexus:
    """An I_T nexus: the initiator port and target port a command travels between.

    For iSCSI the initiator port is ``<initiator name>,i,0x<ISID>`` and the target
    port ``<target name>,t,0x<TPGT>`` (RFC 7143 section 4.4.2).
    """

    initiator_port: str
    target_port: str
    initiator_name: str


@dataclass(slots=True)
class ScsiCommand:
    """One SCSI command as delivered by the transport.

    ``data_out`` is the whole Data-Out buffer received; it may be shorter or
    longer than the CDB implies, and the transport reuses its buffer once the
    command has been executed: nothing may keep it. ``expected_in`` is the
    initiator's Expected Data Transfer Length for Data-In (the allocation length
    still comes from the CDB).
    """

    cdb: bytes
    nexus: Nexus
    data_out: bytes | bytearray | memoryview = b""
    expected_in: int = 0
    task_attr: int = 0


@dataclass(slots=True)
class ScsiResult:
    """The outcome of a command: status, Data-In (already cut to the allocation
    length) and sense data (empty unless the status is CHECK CONDITION)."""

    status: int
    data_in: bytes | bytearray | memoryview = b""
    sense: bytes = b""


class Hasher(Protocol):
    """What a range is hashed into (an xxhash or hashlib object)."""

    def update(self, data: memoryview, /) -> None: ...


class Backend(Protocol):
    """The storage a logical unit is built on (implemented by reservoir.agent.storage).

    Offsets and lengths are in bytes; errors are raised as OSError.
    """

    @property
    def path(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def block_size(self) -> int: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def thin(self) -> bool: ...

    async def read(self, offset: int, length: int) -> bytes: ...

    async def readinto(self, offset: int, buf: memoryview) -> None: ...

    async def hash_range(self, offset: int, length: int, hasher: Hasher) -> None:
        """Feeds the bytes as stored (holes as zeros) to ``hasher``, off the event loop."""

    async def write(self, offset: int, data: bytes | bytearray | memoryview) -> None: ...

    async def flush(self) -> None: ...

    async def discard(self, offset: int, length: int) -> None: ...

    async def write_zeroes(self, offset: int, length: int) -> None: ...

    async def mapped_extents(self, offset: int, length: int) -> list[tuple[int, int, bool]]: ...
