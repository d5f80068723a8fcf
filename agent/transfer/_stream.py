"""Streams: one per connection; each carries extents from the source to the destination.

A stream keeps its connection busy across extent boundaries: up to ``depth``
``piece``-sized commands are in flight on it at any time, for up to
``extents_in_flight`` extents (the next extent's writes go out while the previous
one is being verified), and one extent is read ahead of the network, so a stream
holds at most ``extents_in_flight + 1`` extents.  Verification asks the
destination for its digest of the range (HASH RANGE on our target) and reads the
extent back only where the destination cannot hash.  The :class:`Dispatcher` knows
which extents every stream holds: when a stream's session fails for good they go
back to the queues and the other streams carry them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import xxhash

from reservoir.agent.initiator import CommandTimeout, ConnectionLostError
from reservoir.agent.transfer._endpoints import Channel
from reservoir.agent.transfer._plan import Extent, Queues

STREAM_ERRORS = (ConnectionLostError, CommandTimeout)
ECF_SLACK = 1.1  # a stream takes an extent it would finish within 1.1 x the expected end
RECHECK_S = 0.25  # a stream that left an extent to faster ones looks again this often


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
    depth: int = 8  # commands in flight on the stream
    verify: bool = True
    retries: int = 3
    extents_in_flight: int = 2  # written, not yet verified


class Dispatcher:
    """Hands extents to streams and takes back those of a failed stream.

    At the tail of a copy over unequal paths, a slow stream that takes one more extent
    is what the copy ends up waiting for (8 MiB at 15 Mbit/s is 4.5 s). So a stream
    takes an extent only while it would finish it, after what it holds, no later than
    the streams of its pair together are expected to finish all that is left
    (queued and held), with ``ECF_SLACK``: the earliest-completion-first rule of
    multipath schedulers (Lim et al., ECF, CoNEXT 2017) at extent scale. A stream's
    rate is the bytes of the extents it completed over the time since its first
    take; a stream without one (starting) always takes. Early in a copy the expected
    end is far and every stream takes; near the end the slow ones leave the last
    extents to the fast ones.
    """

    def __init__(
        self, queues: Queues, streams: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.queues = queues
        self.held: list[set[Extent]] = [set() for _ in range(streams)]
        self.written: set[int] = set()  # writes issued, extent not yet done
        self.clock = clock
        self.first_take: list[float | None] = [None] * streams
        self.done_bytes = [0] * streams
        self.failed: set[int] = set()
        self.deferred = 0  # times a stream left an extent to faster ones
        self._changed = asyncio.Event()

    def in_flight(self) -> set[int]:
        """Extents the destination may hold in part: written to, not yet done (also
        when their stream was lost and they went back to the queue)."""
        return set(self.written)

    def writing(self, extent: Extent) -> None:
        self.written.add(extent.id)

    async def take(self, stream: int) -> Extent | None:
        """The next extent, waiting while other streams still hold some that may
        come back, or while faster streams would finish it sooner (see the class);
        None when everything is done or held by nobody else."""
        self.failed.discard(stream)
        while True:
            if self._worth(stream):
                extent = self.queues.take(stream)
                if extent is not None:
                    self.held[stream].add(extent)
                    if self.first_take[stream] is None:
                        self.first_take[stream] = self.clock()
                    return extent
            plan = self.queues.plan
            pair = plan.pair_of(stream)
            if not self.queues.queued(pair) and not any(
                self.held[i] for i in plan.streams_of(pair)
            ):
                return None  # nothing left, and nothing of this pair can come back
            self._changed.clear()
            # rates change with time too: look again after RECHECK_S (a timer, not
            # wait_for, which in 3.11 may swallow the cancellation of a failed stream)
            recheck = asyncio.get_running_loop().call_later(RECHECK_S, self._changed.set)
            try:
                await self._changed.wait()
            finally:
                recheck.cancel()

    def rate(self, stream: int) -> float | None:
        """Bytes per second of the extents the stream completed; None before one."""
        first = self.first_take[stream]
        if first is None or not self.done_bytes[stream]:
            return None
        return self.done_bytes[stream] / max(self.clock() - first, 1e-6)

    def _worth(self, stream: int) -> bool:
        """Whether ``stream`` finishes one more extent no later than its pair is
        expected to finish everything left."""
        mine = self.rate(stream)
        if mine is None:
            return True
        plan = self.queues.plan
        pair = plan.pair_of(stream)
        queued = self.queues.queued(pair)
        if not queued:
            return True  # nothing to leave to others (take() finds nothing anyway)
        size = plan.extent_size  # every extent but the last
        peers = [i for i in plan.streams_of(pair) if i not in self.failed]
        rates = [r for i in peers if (r := self.rate(i)) is not None]
        held = sum(e.length for i in peers for e in self.held[i])
        left = held + queued * size
        end = left / sum(rates)
        if max(rates) <= mine:
            return True  # nobody is faster
        finish = (sum(e.length for e in self.held[stream]) + size) / mine
        if finish <= end * ECF_SLACK:
            return True
        self.deferred += 1
        return False

    def done(self, stream: int, extent: Extent) -> None:
        self.held[stream].discard(extent)
        self.written.discard(extent.id)
        self.done_bytes[stream] += extent.length
        self._changed.set()

    def fail(self, stream: int) -> None:
        self.queues.requeue(self.held[stream])
        self.held[stream].clear()
        self.failed.add(stream)
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
    _window: asyncio.Semaphore | None = None
    _ahead: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))
    _spare: list[bytearray] = field(default_factory=list)  # extent buffers to reuse
    _busy: int = 0  # extents being carried
    _busy_since: float = 0.0

    async def run(self) -> None:
        """Carries extents until none is left; a lost session ends the stream and
        gives its extents back; any other error propagates."""
        self._window = asyncio.Semaphore(self.settings.depth)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._read_ahead())
                group.create_task(self._send_all(group))
        except BaseExceptionGroup as failed:
            errors = _leaves(failed)
            for error in errors:
                if not isinstance(error, STREAM_ERRORS):
                    raise error from None
            self.stats.error = str(errors[0]) or type(errors[0]).__name__
            self.dispatcher.fail(self.stats.index)

    async def _read_ahead(self) -> None:
        """Takes the next extent only once the one read ahead before it is being
        carried: a stream holds at most ``extents_in_flight + 1`` extents, so a slow
        one does not sit on extents a faster one could carry at the end of a copy."""
        while True:
            await self._ahead.acquire()
            extent = await self.dispatcher.take(self.stats.index)
            if extent is None:
                break
            data = await self._read(self.source, extent, asyncio.Semaphore(self.settings.depth))
            await self._queue.put((extent, data))
        await self._queue.put(None)

    async def _send_all(self, group: asyncio.TaskGroup) -> None:
        slots = asyncio.Semaphore(self.settings.extents_in_flight)
        while (item := await self._queue.get()) is not None:
            await slots.acquire()
            self._ahead.release()  # carried now: the next one may be taken and read
            carrier = group.create_task(self._carry(*item))
            carrier.add_done_callback(lambda _: slots.release())

    async def _carry(self, extent: Extent, data: bytearray) -> None:
        """Writes and verifies one extent (rewriting it after a mismatch)."""
        self._started()
        self.dispatcher.writing(extent)
        try:
            want = digest(data)
            for attempt in range(self.settings.retries + 1):
                await self._write(extent, data)
                self.stats.bytes += extent.length
                if not self.settings.verify or await self._verified(extent, want):
                    self.stats.extents += 1
                    self.on_done(self, extent, want)
                    self._give_back(data)  # every command on it has completed
                    return
                if attempt < self.settings.retries:
                    self.stats.retries += 1
            raise VerifyError(f"extent {extent.id} at byte {extent.offset} did not verify")
        finally:
            self._stopped()

    def _started(self) -> None:
        if self._busy == 0:
            self._busy_since = asyncio.get_running_loop().time()
        self._busy += 1

    def _stopped(self) -> None:
        self._busy -= 1
        if self._busy == 0:
            self.stats.seconds += asyncio.get_running_loop().time() - self._busy_since

    async def verify(self, extent: Extent, want: bytes) -> bool:
        """Whether the destination holds ``want`` (an extent's digest) for it now."""
        if self._window is None:
            self._window = asyncio.Semaphore(self.settings.depth)
        return await self._verified(extent, want)

    async def resend(self, extent: Extent) -> None:
        """Reads the extent from the source again and carries it (written, verified)."""
        if self._window is None:
            self._window = asyncio.Semaphore(self.settings.depth)
        data = await self._read(self.source, extent, self._window)
        await self._carry(extent, data)

    async def _verified(self, extent: Extent, want: bytes) -> bool:
        """The destination's digest of the extent (read back where it cannot hash)."""
        theirs = await self.dest.digest(extent.dest_offset, extent.length)
        if theirs is None:
            assert self._window is not None
            back = await self._read(self.dest, extent, self._window, extent.dest_offset)
            theirs = digest(back)
            self._give_back(back)
        return theirs == want

    async def _read(
        self, channel: Channel, extent: Extent, limit: asyncio.Semaphore, at: int | None = None
    ) -> bytearray:
        """The extent read from ``channel`` at ``at`` (the source offset by default)."""
        buf = self._buffer(extent.length)
        view = memoryview(buf)
        base = extent.offset if at is None else at

        async def piece(offset: int, length: int) -> None:
            start = offset - extent.offset
            await channel.readinto(base + start, view[start : start + length])

        try:
            await self._pieces(extent, piece, limit)
        except BaseException:
            self._give_back(buf)
            raise
        return buf

    def _buffer(self, length: int) -> bytearray:
        """An extent buffer, reused: a fresh one costs a page fault every 4 KiB."""
        for i, buf in enumerate(self._spare):
            if len(buf) == length:
                return self._spare.pop(i)
        return bytearray(length)

    def _give_back(self, buf: bytearray) -> None:
        if len(self._spare) < self.settings.extents_in_flight + 2:
            self._spare.append(buf)

    async def _write(self, extent: Extent, data: bytearray) -> None:
        view = memoryview(data)

        async def piece(offset: int, length: int) -> None:
            start = offset - extent.offset
            await self.dest.write(extent.dest_offset + start, view[start : start + length])

        assert self._window is not None
        await self._pieces(extent, piece, self._window)

    async def _pieces(
        self,
        extent: Extent,
        run: Callable[[int, int], Awaitable[None]],
        limit: asyncio.Semaphore,
    ) -> None:
        size = self.settings.piece

        async def one(offset: int) -> None:
            async with limit:
                await run(offset, min(size, extent.end - offset))

        await asyncio.gather(*(one(o) for o in range(extent.offset, extent.end, size)))


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions of a (nested) group, flattened."""
    leaves: list[BaseException] = []
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            leaves += _leaves(error)
        else:
            leaves.append(error)
    return leaves
