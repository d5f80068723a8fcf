"""Streams: one per connection; each carries extents from the source to the destination.

A stream keeps its connection busy across extent boundaries: up to ``depth``
``piece``-sized commands are in flight on it at any time, for up to
``extents_in_flight`` extents being written, and one extent is taken ahead of the
network, so a stream holds the data of at most ``extents_in_flight + 1`` extents.
A written extent gives its data back and frees its place while the destination
answers its check (at most ``checks_in_flight`` of them wait so, holding only their
digests): a check that reads the destination's storage (8 MiB from disk) holds up
neither the stream nor its buffers.  From a local source to a session
that can send from a file, an extent is not read into memory at all: it is hashed
from the file in a worker thread and its pieces go out as :class:`FileSpan` s
(sendfile); elsewhere it is read into a reused extent buffer.  Verification asks the
destination for its digest of the range (HASH RANGE on our target) and reads the
extent back only where the destination cannot hash.  The :class:`Dispatcher` knows
which extents every stream holds: when a stream's session fails for good they go
back to the queues and the other streams carry them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field

import xxhash

from reservoir.agent.initiator import CommandTimeout, ConnectionLostError
from reservoir.agent.iscsi.pdu import FileSpan
from reservoir.agent.transfer._endpoints import Channel, LocalChannel, span_volume
from reservoir.agent.transfer._errors import CopyError
from reservoir.agent.transfer._extent_write import ExtentWrite
from reservoir.agent.transfer._plan import Extent, Queues
from reservoir.agent.transfer._window import TcpInfoSource, Window

Loaded = bytearray | FileSpan  # an extent's data: read into a buffer, or left in the file
STREAM_ERRORS = (ConnectionLostError, CommandTimeout)
ECF_SLACK = 1.1  # a stream takes an extent it would finish within 1.1 x the expected end
RECHECK_S = 0.25  # a stream that left an extent to faster ones looks again this often


class _Once:
    """Calls ``action`` the first time it is called, never again."""

    def __init__(self, action: Callable[[], object]) -> None:
        self.action: Callable[[], object] | None = action

    def __call__(self) -> None:
        if self.action is not None:
            action, self.action = self.action, None
            action()

    def after(self, _: object) -> None:
        """As a done callback."""
        self()


class VerifyError(CopyError):
    """An extent read back differently after every retry."""


def digest(data: bytes | bytearray | memoryview) -> bytes:
    return xxhash.xxh3_128_digest(data)


def digests(data: bytearray, piece: int, receipt: bool) -> tuple[bytes, bytes | None]:
    """The extent's digest and, with ``receipt``, what the destination's receipts of
    its ``piece``-byte writes should say (:func:`receipt_digest`), in one pass
    (:class:`PieceHasher`)."""
    hasher = PieceHasher(piece, receipt)
    hasher.update(memoryview(data))
    return hasher.digests()


class PieceHasher:
    """An extent's digest and the digest its receipts should have, fed in order in
    chunks of any size (a whole extent buffer, or a range read back from a file by
    :meth:`Volume.hash_range` in a worker thread). Each piece is hashed for the
    whole and for its receipt while it is still in the CPU's cache (on this machine
    5.9 GiB/s against 4.4 for two passes over an 8 MiB extent)."""

    def __init__(self, piece: int, receipt: bool) -> None:
        self.piece, self.receipt = piece, receipt
        self.whole = xxhash.xxh3_128()
        self.part = xxhash.xxh3_128()
        self.part_bytes = 0
        self.parts: list[bytes] = []

    def update(self, data: memoryview, /) -> None:
        if not self.receipt:
            self.whole.update(data)
            return
        while len(data):
            take = min(self.piece - self.part_bytes, len(data))
            self.whole.update(data[:take])
            self.part.update(data[:take])
            self.part_bytes += take
            data = data[take:]
            if self.part_bytes == self.piece:
                self._end_part()

    def _end_part(self) -> None:
        self.parts.append(self.part.digest())
        self.part.reset()
        self.part_bytes = 0

    def digests(self) -> tuple[bytes, bytes | None]:
        if not self.receipt:
            return self.whole.digest(), None
        if self.part_bytes:
            self._end_part()
        return self.whole.digest(), digest(b"".join(self.parts))


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
    helped: int = 0  # pieces of other streams' extents it wrote (at the tail of a copy)
    by_receipt: int = 0  # extents verified by the destination's receipts (not storage)
    end_by_receipt: int = 0  # ... of those it checked again at the end of the copy
    found: int = 0  # extents a stopped run had in flight, found written (not sent again)
    # extents the end of the copy found unchanged since the destination read them back
    # from storage (its read-backs: nothing read again)
    end_by_read_back: int = 0

    @property
    def up(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class Settings:
    piece: int = 1 << 20
    depth: int = 8  # commands in flight on the stream
    verify: bool = True
    retries: int = 3
    receipts: bool = False  # check the destination's receipts before its storage
    extents_in_flight: int = 2  # being written (each holds its data)
    checks_in_flight: int = 8  # written, their check not yet answered (each holds a digest)


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
        self.writes: dict[int, list[ExtentWrite]] = {}  # by pair: extents being written
        self.first_write: float | None = None  # when the first extent's writes went out
        self._changed = asyncio.Event()

    def in_flight(self) -> set[int]:
        """Extents the destination may hold in part: written to, not yet done (also
        when their stream was lost and they went back to the queue)."""
        return set(self.written)

    def writing(self, extent: Extent) -> None:
        if self.first_write is None:
            self.first_write = self.clock()
        self.written.add(extent.id)

    def begin_write(self, work: ExtentWrite) -> None:
        self.writes.setdefault(self.queues.plan.pair_of(work.owner), []).append(work)
        self._changed.set()

    def end_write(self, work: ExtentWrite) -> None:
        self.writes[self.queues.plan.pair_of(work.owner)].remove(work)

    def nudge(self) -> None:
        """Something changed that a waiting stream may act on (a piece came back)."""
        self._changed.set()

    def _to_help(self, stream: int) -> ExtentWrite | None:
        """Another stream's extent of the pair with pieces nobody issued yet."""
        works = self.writes.get(self.queues.plan.pair_of(stream), [])
        open_ = [w for w in works if w.owner != stream and w.pending and not w.abandoned]
        return max(open_, key=lambda w: len(w.pending), default=None)

    async def take(self, stream: int) -> Extent | ExtentWrite | None:
        """The next extent, waiting while other streams still hold some that may
        come back, or while faster streams would finish it sooner (see the class);
        None when everything is done or held by nobody else. A stream whose own
        pieces are all issued meanwhile gets another's extent write to help with
        (_extent_write)."""
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
            if self._all_issued(stream) and (work := self._to_help(stream)) is not None:
                return work
            self._changed.clear()
            # rates change with time too: look again after RECHECK_S (a timer, not
            # wait_for, which in 3.11 may swallow the cancellation of a failed stream)
            recheck = asyncio.get_running_loop().call_later(RECHECK_S, self._changed.set)
            try:
                await self._changed.wait()
            finally:
                recheck.cancel()

    def _all_issued(self, stream: int) -> bool:
        """Whether every extent ``stream`` holds has all its pieces on a connection (or
        is written, its check under way): then what the stream has left to send is
        in its socket, and its window's room is better spent on another's pieces.
        (An extent sent again after a failed check counts as issued while it is read
        and hashed once more: rare, and helping meanwhile costs nothing but order.)"""
        if any(extent.id not in self.written for extent in self.held[stream]):
            return False  # one not being written yet: the stream has its own to send
        works = self.writes.get(self.queues.plan.pair_of(stream), [])
        return not any(w.owner == stream and w.pending for w in works)

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


# (worker, extent, its digest, what the destination's receipts should say of it)
Done = Callable[["StreamWorker", Extent, bytes, bytes | None, bool], None]
"""Called with an extent done (verified where the copy verifies): its digest, what its
receipts should say (receipt mode), and whether this stream wrote it (False: it was
found on the destination already, see ``maybe_written``)."""


@dataclass
class StreamWorker:
    stats: StreamStats
    source: Channel
    dest: Channel
    dispatcher: Dispatcher
    settings: Settings
    on_done: Done
    tcp_info: TcpInfoSource | None = None  # the connection writes go over, to size the window
    # extents a stopped run may have written (in flight at its stop): each is looked
    # for on the destination (its digest, where it hashes) before it is sent again
    maybe_written: Collection[int] = frozenset()
    _queue: asyncio.Queue[tuple[Extent, Loaded] | None] = field(
        default_factory=lambda: asyncio.Queue(maxsize=1)
    )
    _window: Window | None = None
    _ahead: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))
    _spare: list[bytearray] = field(default_factory=list)  # extent buffers to reuse
    _checks: asyncio.Semaphore | None = None  # written extents waiting for their check
    _busy: int = 0  # extents being carried
    _busy_since: float = 0.0

    async def run(self) -> None:
        """Carries extents until none is left; a lost session ends the stream and
        gives its extents back; any other error propagates."""
        self._window = self._new_window()
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
            if isinstance(extent, ExtentWrite):
                self._ahead.release()
                await self._help(extent)
                continue
            await self._queue.put((extent, await self._load(extent)))
        await self._queue.put(None)

    def _new_window(self) -> Window:
        return Window(self.settings.depth, self.settings.piece, self.tcp_info)

    async def _send_all(self, group: asyncio.TaskGroup) -> None:
        slots = asyncio.Semaphore(self.settings.extents_in_flight)
        while (item := await self._queue.get()) is not None:
            await slots.acquire()
            self._ahead.release()  # carried now: the next one may be taken and read
            free_place = _Once(slots.release)
            carrier = group.create_task(self._carry(*item, free_place))
            carrier.add_done_callback(free_place.after)

    async def _carry(
        self, extent: Extent, data: Loaded | None, free_place: Callable[[], None] = lambda: None
    ) -> None:
        """Writes and verifies one extent (rewriting it after a mismatch). Once it is
        written, ``free_place`` lets the stream carry the next one while the destination
        answers the check, and its data is given back (read again for a rewrite), so
        a check that reads the destination's storage holds up neither the stream nor
        an extent buffer."""
        self._started()
        try:
            for attempt in range(self.settings.retries + 1):
                if data is None:  # given back after the last attempt's write
                    data = await self._load(extent)
                # hashed at every attempt: what is sent again is read from the source
                # again (a span goes out from the file as the file is then)
                want, receipt = await self._digests(data)
                if attempt == 0 and await self._already_there(extent, want):
                    self.stats.found += 1
                    self.on_done(self, extent, want, None, False)
                    self._give_back(data)
                    return
                self.dispatcher.writing(extent)  # from here the destination may hold part
                await self._write(extent, data)
                self.stats.bytes += extent.length
                if self.settings.verify:
                    self._give_back(data)  # every command on it has completed
                    data = None
                    if not await self._checked_aside(extent, want, receipt, free_place):
                        if attempt < self.settings.retries:
                            self.stats.retries += 1
                        continue
                self.stats.extents += 1
                self.on_done(self, extent, want, receipt, True)
                if data is not None:
                    self._give_back(data)
                return
            raise VerifyError(f"extent {extent.id} at byte {extent.offset} did not verify")
        finally:
            self._stopped()

    async def _already_there(self, extent: Extent, want: bytes) -> bool:
        """Whether an extent a stopped run may have written is on the destination as the
        source has it (asked where the destination hashes: one round trip, not a send)."""
        if extent.id not in self.maybe_written or not self.settings.verify:
            return False
        return await self.dest.digest(extent.dest_offset, extent.length) == want

    async def _checked_aside(
        self, extent: Extent, want: bytes, receipt: bytes | None, free_place: Callable[[], None]
    ) -> bool:
        """:meth:`_checked`, with the stream free to carry its next extent meanwhile
        (at most ``checks_in_flight`` of its extents wait for their checks)."""
        if self._checks is None:
            self._checks = asyncio.Semaphore(self.settings.checks_in_flight)
        async with self._checks:
            free_place()
            return await self._checked(extent, want, receipt)

    def _started(self) -> None:
        if self._busy == 0:
            self._busy_since = asyncio.get_running_loop().time()
        self._busy += 1

    def _stopped(self) -> None:
        self._busy -= 1
        if self._busy == 0:
            self.stats.seconds += asyncio.get_running_loop().time() - self._busy_since

    async def verify(
        self, extent: Extent, want: bytes, receipt: bytes | None = None, *, done_here: bool = False
    ) -> bool:
        """Whether the destination holds ``want`` (an extent's digest) for it now: by
        its receipts where ``receipt`` is given and they still cover the extent (no
        change over it since the writes they record), else, for an extent
        ``done_here`` (by this run), by the digest the destination kept when it hashed the extent's
        storage (no change since), else from its storage."""
        if self._window is None:
            self._window = self._new_window()
        if receipt is not None and (same := await self._receipt_says(extent, receipt)) is not None:
            self.stats.end_by_receipt += same
            return same
        kept = await self.dest.read_back(extent.dest_offset, extent.length) if done_here else None
        if kept is not None:
            self.stats.end_by_read_back += kept == want
            return kept == want
        return await self._verified(extent, want)

    async def resend(self, extent: Extent) -> None:
        """Reads the extent from the source again and carries it (written, verified)."""
        if self._window is None:
            self._window = self._new_window()
        await self._carry(extent, None)

    async def _checked(self, extent: Extent, want: bytes, receipt: bytes | None) -> bool:
        """Whether the destination received the extent as sent (``receipt`` mode, where
        its receipts cover the extent) or holds it (storage)."""
        if receipt is not None and (same := await self._receipt_says(extent, receipt)) is not None:
            self.stats.by_receipt += same
            return same
        return await self._verified(extent, want)

    async def _receipt_says(self, extent: Extent, receipt: bytes) -> bool | None:
        """Whether the destination's receipts of the extent are ``receipt``; None when
        they do not cover it (a change over it since, or a target without them)."""
        theirs = await self.dest.receipt(extent.dest_offset, extent.length)
        return None if theirs is None else theirs == receipt

    async def _verified(self, extent: Extent, want: bytes) -> bool:
        """The destination's digest of the extent (read back where it cannot hash)."""
        theirs = await self.dest.digest(extent.dest_offset, extent.length)
        if theirs is None:
            back = await self._read(
                self.dest, extent, asyncio.Semaphore(self.settings.depth), extent.dest_offset
            )
            theirs = digest(back)
            self._give_back(back)
        return theirs == want

    async def _load(self, extent: Extent) -> Loaded:
        """The extent's data from the source: a span of the source's file where the
        destination's connection sends it from there (see _writer), else read into
        an extent buffer."""
        volume = span_volume(self.source, self.dest)
        if volume is not None:
            return FileSpan(volume, extent.offset, extent.length)
        return await self._read(self.source, extent, asyncio.Semaphore(self.settings.depth))

    async def _digests(self, data: Loaded) -> tuple[bytes, bytes | None]:
        """The extent's digest (and what its receipts should say): a span is read
        from its file in a worker thread, chunk by chunk, while the chunk is in cache."""
        if not isinstance(data, FileSpan):
            return digests(data, self.settings.piece, self.settings.receipts)
        source = self.source
        assert isinstance(source, LocalChannel), "spans are of a local source"
        hasher = PieceHasher(self.settings.piece, self.settings.receipts)
        await source.volume.hash_range(data.offset, data.length, hasher)
        return hasher.digests()

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

    def _give_back(self, buf: Loaded) -> None:
        if isinstance(buf, bytearray) and len(self._spare) < self.settings.extents_in_flight + 2:
            self._spare.append(buf)

    async def _write(self, extent: Extent, data: Loaded) -> None:
        """Issues the extent's pieces as the window lets them go; other streams of the
        pair may write some (see _extent_write). Returns once every piece completed."""
        view = data if isinstance(data, FileSpan) else memoryview(data)
        work = ExtentWrite(extent, self.stats.index, view, self.settings.piece)
        self.dispatcher.begin_write(work)
        mine: set[asyncio.Task[None]] = set()
        try:
            while not work.complete:
                if work.error is not None:
                    raise work.error
                if work.pending:
                    await self._issue(work, mine)
                else:
                    await work.changed()
            if work.error is not None:
                raise work.error
        finally:
            work.abandon()
            self.dispatcher.end_write(work)
            await _cancel_all(mine)

    async def _help(self, work: ExtentWrite) -> None:
        """Writes pieces of another stream's extent over this stream's connection while
        it has pending ones; a piece whose write fails goes back to its owner, and the
        failure ends this stream as it would have ended it on its own extent."""
        mine: set[asyncio.Task[None]] = set()
        failed: list[BaseException] = []
        try:
            while work.pending and not work.abandoned and work.error is None and not failed:
                await self._issue(work, mine, failed)
            await asyncio.gather(*mine)
        finally:
            await _cancel_all(mine)
        if failed:
            raise failed[0]

    async def _issue(
        self,
        work: ExtentWrite,
        tasks: set[asyncio.Task[None]],
        failed: list[BaseException] | None = None,
    ) -> None:
        """One pending piece of ``work`` on this stream's connection, once the window
        has room (another stream may have taken it meanwhile: then nothing). A helper
        passes ``failed``, where its pieces' errors go."""
        assert self._window is not None
        await self._window.acquire()
        offset = work.take_piece() if work.error is None else None
        if offset is None:
            self._window.release()
            await asyncio.sleep(0)  # the window had room: let the others run before a retry
            return
        if not work.pending:
            self.dispatcher.nudge()  # its owner may help others now (_all_issued)
        piece = self._piece(work, offset, failed)
        task = asyncio.get_running_loop().create_task(piece)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _piece(
        self, work: ExtentWrite, offset: int, failed: list[BaseException] | None
    ) -> None:
        """Writes one piece; its outcome goes to ``work`` (and a helper's error to
        ``failed``), so the task itself only ever ends in a cancellation."""
        assert self._window is not None
        extent = work.extent
        at = extent.dest_offset + offset - extent.offset
        try:
            await self.dest.write(at, work.piece_view(offset))
        except BaseException as exc:
            if failed is None:
                work.fail(exc)
            else:
                work.piece_back(offset)
                self.dispatcher.nudge()
                failed.append(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            work.piece_done()
            self.stats.helped += failed is not None
        finally:
            self._window.release()

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


async def _cancel_all(tasks: set[asyncio.Task[None]]) -> None:
    """Cancels the tasks still running and waits for them (their errors are known)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions of a (nested) group, flattened."""
    leaves: list[BaseException] = []
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            leaves += _leaves(error)
        else:
            leaves.append(error)
    return leaves
