"""Shared fixtures of the SCSI tests: an in-memory Backend and command helpers."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from reservoir.agent.scsi import (
    Hasher,
    LogicalUnit,
    LunTable,
    Nexus,
    ScsiCommand,
    Status,
    decode_sense,
)

T = TypeVar("T")

TARGET = "iqn.2026-11.org.reservoir:t1"
NEXUS_A = Nexus(
    initiator_port="iqn.2005-03.org.open-iscsi:a,i,0x23d000000001",
    target_port=f"{TARGET},t,0x0001",
    initiator_name="iqn.2005-03.org.open-iscsi:a",
)
NEXUS_B = Nexus(
    initiator_port="iqn.2005-03.org.open-iscsi:b,i,0x23d000000002",
    target_port=f"{TARGET},t,0x0002",
    initiator_name="iqn.2005-03.org.open-iscsi:b",
)


class MemoryBackend:
    """A Backend over a bytearray; allocation is tracked per block when thin."""

    def __init__(
        self,
        blocks: int = 2048,
        block_size: int = 512,
        *,
        thin: bool = True,
        read_only: bool = False,
    ) -> None:
        self.path = "memory"
        self.block_size = block_size
        self.size = blocks * block_size
        self.thin = thin
        self.read_only = read_only
        self.data = bytearray(self.size)
        self.mapped = bytearray(blocks if thin else b"\x01" * blocks)
        self.flushes = 0
        self.fail: dict[str, Exception] = {}
        self.calls: list[str] = []

    def _maybe_fail(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise self.fail[name]

    def _mark(self, offset: int, length: int, value: int) -> None:
        first = offset // self.block_size
        last = -(-(offset + length) // self.block_size)
        self.mapped[first:last] = bytes((value,)) * (last - first)

    async def read(self, offset: int, length: int) -> bytes:
        self._maybe_fail("read")
        return bytes(self.data[offset : offset + length])

    async def readinto(self, offset: int, buf: memoryview) -> None:
        self._maybe_fail("read")
        buf[:] = self.data[offset : offset + len(buf)]

    async def hash_range(self, offset: int, length: int, hasher: Hasher) -> None:
        self._maybe_fail("read")
        hasher.update(memoryview(self.data)[offset : offset + length])

    async def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        self._maybe_fail("write")
        self.data[offset : offset + len(data)] = data
        self._mark(offset, len(data), 1)

    async def flush(self) -> None:
        self._maybe_fail("flush")
        self.flushes += 1

    async def discard(self, offset: int, length: int) -> None:
        self._maybe_fail("discard")
        self.data[offset : offset + length] = bytes(length)
        self._mark(offset, length, 0)

    async def write_zeroes(self, offset: int, length: int) -> None:
        self._maybe_fail("write_zeroes")
        self.data[offset : offset + length] = bytes(length)
        self._mark(offset, length, 1)

    async def mapped_extents(self, offset: int, length: int) -> list[tuple[int, int, bool]]:
        self._maybe_fail("mapped_extents")
        bs = self.block_size
        extents: list[tuple[int, int, bool]] = []
        for block in range(offset // bs, -(-(offset + length) // bs)):
            state = bool(self.mapped[block])
            if extents and extents[-1][2] == state:
                start, size, _ = extents[-1]
                extents[-1] = (start, size + bs, state)
            else:
                extents.append((block * bs, bs, state))
        return extents


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def make_lu(
    blocks: int = 2048,
    block_size: int = 512,
    *,
    thin: bool = True,
    backend_read_only: bool = False,
    **options: Any,
) -> tuple[LogicalUnit, MemoryBackend]:
    backend = MemoryBackend(blocks, block_size, thin=thin, read_only=backend_read_only)
    options.setdefault("ua_on_new_nexus", False)
    lu = LogicalUnit(backend, lun=0, serial="SN0001", target_name=TARGET, **options)
    return lu, backend


@dataclass(frozen=True)
class Reply:
    """A ScsiResult with its Data-In as bytes."""

    status: int
    data_in: bytes
    sense: bytes


def execute(
    lu: LogicalUnit | LunTable,
    cdb: bytes,
    data: bytes = b"",
    *,
    nexus: Nexus = NEXUS_A,
    lun: int = 0,
) -> Reply:
    cmd = ScsiCommand(cdb=cdb, nexus=nexus, data_out=data, expected_in=1 << 20)
    result = run(lu.execute(lun, cmd)) if isinstance(lu, LunTable) else run(lu.execute(cmd))
    return Reply(result.status, bytes(result.data_in), result.sense)


def sense_of(result: Reply) -> tuple[int, int, int]:
    assert result.status == Status.CHECK_CONDITION, result
    return decode_sense(result.sense)


def assert_good(result: Reply) -> None:
    assert result.status == Status.GOOD, (result.status, result.sense.hex())


# CDB builders ------------------------------------------------------------------------


def read10(lba: int, blocks: int, flags: int = 0) -> bytes:
    return struct.pack(">BBIBHB", 0x28, flags, lba, 0, blocks, 0)


def write10(lba: int, blocks: int, flags: int = 0) -> bytes:
    return struct.pack(">BBIBHB", 0x2A, flags, lba, 0, blocks, 0)


def read16(lba: int, blocks: int, flags: int = 0) -> bytes:
    return struct.pack(">BBQIBB", 0x88, flags, lba, blocks, 0, 0)


def write16(lba: int, blocks: int, flags: int = 0) -> bytes:
    return struct.pack(">BBQIBB", 0x8A, flags, lba, blocks, 0, 0)


def rw12(opcode: int, lba: int, blocks: int, flags: int = 0) -> bytes:
    return struct.pack(">BBIIBB", opcode, flags, lba, blocks, 0, 0)


def cdb10(opcode: int, lba: int, blocks: int, flags: int = 0) -> bytes:
    return struct.pack(">BBIBHB", opcode, flags, lba, 0, blocks, 0)


def cdb16(opcode: int, lba: int, blocks: int, flags: int = 0) -> bytes:
    return struct.pack(">BBQIBB", opcode, flags, lba, blocks, 0, 0)


def compare_and_write(lba: int, blocks: int, flags: int = 0) -> bytes:
    return struct.pack(">BBQ3xBBB", 0x89, flags, lba, blocks, 0, 0)


def inquiry(evpd: int = 0, page: int = 0, alloc: int = 255) -> bytes:
    return struct.pack(">BBBHB", 0x12, evpd, page, alloc, 0)


def service_action_in(action: int, lba: int = 0, alloc: int = 32) -> bytes:
    return struct.pack(">BBQIBB", 0x9E, action, lba, alloc, 0, 0)


def unmap_cdb(length: int, anchor: int = 0) -> bytes:
    return struct.pack(">BB4xBHB", 0x42, anchor, 0, length, 0)


def unmap_list(*ranges: tuple[int, int]) -> bytes:
    descriptors = b"".join(struct.pack(">QI4x", lba, count) for lba, count in ranges)
    return struct.pack(">HH4x", len(descriptors) + 6, len(descriptors)) + descriptors


def prout(
    action: int, key: int, service_key: int, pr_type: int = 0, flags: int = 0
) -> tuple[bytes, bytes]:
    cdb = struct.pack(">BBBxxIB", 0x5F, action, pr_type, 24, 0)
    data = struct.pack(">QQ4xBxH", key, service_key, flags, 0)
    return cdb, data


def prin(action: int, alloc: int = 1024) -> bytes:
    return struct.pack(">BB5xHB", 0x5E, action, alloc, 0)


TEST_UNIT_READY = bytes(6)
