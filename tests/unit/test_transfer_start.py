"""A copy's streams start writing one by one as they open, not once the slowest is
open (fake sides: a stream's channel opens only when the test lets it)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from reservoir.agent.initiator import WriteData
from reservoir.agent.iscsi.pdu import FileSpan
from reservoir.agent.transfer import _checkpoint as ck
from reservoir.agent.transfer._endpoints import Channel, PathSpec
from reservoir.agent.transfer._engine import CopyOptions, Run
from reservoir.agent.transfer._plan import ServerPair, make_plan

BLOCK = 512
SIZE = 1 << 20
EXTENT = 64 << 10


class Memory:
    """A channel over bytes in memory; ``written`` is set by its first write."""

    def __init__(self, data: bytes) -> None:
        self.data = bytearray(data)
        self.written = asyncio.Event()

    async def read(self, offset: int, length: int) -> bytes:
        await asyncio.sleep(0)
        return bytes(self.data[offset : offset + length])

    async def readinto(self, offset: int, view: memoryview) -> None:
        view[:] = await self.read(offset, len(view))

    async def write(self, offset: int, data: WriteData) -> None:
        await asyncio.sleep(0)
        assert not isinstance(data, FileSpan)
        self.data[offset : offset + len(data)] = data
        self.written.set()

    async def digest(self, offset: int, length: int) -> bytes | None:
        return None

    async def receipt(self, offset: int, length: int) -> bytes | None:
        return None

    async def flush(self) -> None:
        return None

    async def release(self) -> None:
        return None

    async def close(self) -> None:
        return None


class Side:
    """One end; with ``late``, that stream's channel opens only after the first write
    of another stream (a session that logged in after the probe, registering)."""

    device: str | None = None

    def __init__(self, memory: Memory, remote: bool, late: int | None = None) -> None:
        self.memory, self.remote, self.late, self.label = memory, remote, late, "fake"
        self.size, self.block_size = len(memory.data), BLOCK

    async def channel(self, stream: int, path: PathSpec | None) -> Channel:
        if stream == self.late:
            await self.memory.written.wait()
        return self.memory

    async def close(self) -> None:
        return None


def test_a_stream_writes_as_soon_as_it_is_open_without_waiting_for_the_others(
    tmp_path: Path,
) -> None:
    source = Memory(os.urandom(SIZE))
    dest = Memory(bytes(SIZE))
    plan = make_plan(0, SIZE, extent_size=EXTENT, block_size=BLOCK, pair=ServerPair("s", "d", 2))
    run = Run(
        plan,
        Side(source, remote=False),
        Side(dest, remote=True, late=1),
        paths=[],
        options=CopyOptions(streams=2, extent_size=EXTENT, piece_size=16 << 10),
        checkpoint=ck.Checkpoint(tmp_path / "ck.json", ck.CopyKey("s", "d", 0, SIZE, EXTENT)),
        progress=None,
    )

    async def main() -> None:
        summary = await asyncio.wait_for(run.execute(), 10)
        assert summary.verified and dest.data == source.data
        assert [s.error for s in summary.streams] == [None, None]
        assert all(s.extents for s in summary.streams)  # the late one took part too

    asyncio.run(main())
