"""Streams: one per connection; each carries extents from the source to the destination.

A stream reads its next extent ahead of the network (at most one extent read and one
queued besides the one being sent, so memory stays within three extents per stream),
writes it as ``piece``-sized commands with ``depth`` in flight, reads it back and
compares digests when verifying.  The :class:`Dispatcher` knows which extents every
stream holds: when a stream's session fails for good they go back to the queues and
the other streams carry them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import xxhash

from reservoir.agent.aio import cancel_and_wait
from reservoir.agent.initiator import CommandTimeout, ConnectionLostError
from reservoir.agent.transfer._endpoints import Channel
from reservoir.agent.transfer._plan import Extent, Queues

STREAM_ERRORS = (ConnectionLostError, CommandTimeout)


class VerifyError(Exception):
    """An extent read back differently after every retry."""


def digest(data: bytes | bytearray | memoryview) -> bytes:
    return xxhash.xxh3_128_digest(data)


@dataclass
class StreamStats:
    index: int
    path: str
    bytes: int = 0
    extents: int = 0
    retries: int = 0
    seconds: float = 0.0
    error: str | None = None
    reopened: int = 0  # times reopened after its path recovered

    @property
    def up(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class Settings:
    piece: int = 1 << 20
    depth: int = 8
    verify: bool = True
    retries: int = 3


class Dispatcher:
    """Hands extents to streams and takes back those of a failed stream."""

    def __init__(self, queues: Queues, streams: int) -> None:
        self.queues = queues
        self.held: list[set[Extent]] = [set() for _ in range(streams)]
        self._changed = asyncio.Event()

    def in_flight(self) -> set[int]:
        return {e.id for held in self.held for e in held}

    async def take(self, stream: int) -> Extent | None:
        """The next extent, waiting while other streams still hold some that may
        come back; None when everything is done or held by nobody else."""
        while True:
            extent = self.queues.take(stream)
            if extent is not None:
                self.held[stream].add(extent)
                return extent
            if not any(self.held):
                return None
            self._changed.clear()
            await self._changed.wait()

    def done(self, stream: int, extent: Extent) -> None:
        self.held[stream].discard(extent)
        self._changed.set()

    def fail(self, stream: int) -> None:
        self.queues.requeue(self.held[stream])
        self.held[stream].clear()
        self._changed.set()


Done = Callable[["StreamWorker", Extent, bytes], None]


@dataclass
class StreamWorker:
    stats: StreamStats
    source: Channel
    dest: Channel
    dispatcher: Dispatcher
    settings: Settings
    on_done: Done
    _queue: asyncio.Queue[tuple[Extent, bytearray] | None] = field(
        default_factory=lambda: asyncio.Queue(maxsize=1)
    )

    async def run(self) -> None:
        """Carries extents until none is left; a lost session ends the stream and
        gives its extents back; any other error propagates."""
        reader = asyncio.create_task(self._read_ahead())
        try:
            await self._send_all(reader)
        except STREAM_ERRORS as exc:
            self.stats.error = str(exc) or type(exc).__name__
            self.dispatcher.fail(self.stats.index)
        finally:
            with contextlib.suppress(*STREAM_ERRORS):
                await cancel_and_wait(reader)

    async def _send_all(self, reader: asyncio.Task[None]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            get = asyncio.ensure_future(self._queue.get())
            await asyncio.wait({get, reader}, return_when=asyncio.FIRST_COMPLETED)
            if not get.done():
                get.cancel()
                reader.result()  # raises the reader's error
                item = await self._queue.get()
            else:
                item = get.result()
            if item is None:
                return
            started = loop.time()
            extent_digest = await self._send(*item)
            self.stats.seconds += loop.time() - started
            self.on_done(self, item[0], extent_digest)

    async def _read_ahead(self) -> None:
        while (extent := await self.dispatcher.take(self.stats.index)) is not None:
            data = await self._read(self.source, extent)
            await self._queue.put((extent, data))
        await self._queue.put(None)

    async def _send(self, extent: Extent, data: bytearray) -> bytes:
        """Writes (and verifies) one extent; returns its digest."""
        want = digest(data)
        for attempt in range(self.settings.retries + 1):
            await self._write(extent, data)
            self.stats.bytes += extent.length
            if not self.settings.verify or digest(await self._read(self.dest, extent)) == want:
                self.stats.extents += 1
                return want
            if attempt < self.settings.retries:
                self.stats.retries += 1
        raise VerifyError(f"extent {extent.id} at byte {extent.offset} did not verify")

    async def _read(self, channel: Channel, extent: Extent) -> bytearray:
        buf = bytearray(extent.length)

        async def piece(offset: int, length: int) -> None:
            start = offset - extent.offset
            buf[start : start + length] = await channel.read(offset, length)

        await self._pieces(extent, piece)
        return buf

    async def _write(self, extent: Extent, data: bytearray) -> None:
        view = memoryview(data)

        async def piece(offset: int, length: int) -> None:
            start = offset - extent.offset
            await self.dest.write(offset, view[start : start + length])

        await self._pieces(extent, piece)

    async def _pieces(self, extent: Extent, run: Callable[[int, int], Awaitable[None]]) -> None:
        limit = asyncio.Semaphore(self.settings.depth)
        size = self.settings.piece

        async def one(offset: int) -> None:
            async with limit:
                await run(offset, min(size, extent.end - offset))

        await asyncio.gather(*(one(o) for o in range(extent.offset, extent.end, size)))
