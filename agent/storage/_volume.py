"""Volume: a regular file or block device opened for I/O through an Engine."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import weakref
from collections.abc import Awaitable, Callable
from types import TracebackType

from . import _sys
from ._base import DirectIo, Engine, Handle
from ._changes import ChangeMark, change_mark
from ._engine import default_engine
from ._errors import StorageError, from_os_error, storage_error
from ._read_back import Hasher

ZERO_CHUNK = 1 << 20
WRITEBACK_EVERY = 32 << 20  # bytes written between two writeback starts
NOWAIT_MAX = 1 << 20  # reads up to this size try the page cache first
NOWAIT_BACKOFF_MAX = 64
_ZEROS = memoryview(bytes(ZERO_CHUNK))
# errnos meaning "this device or filesystem cannot do that"
_UNSUPPORTED = frozenset({errno.EOPNOTSUPP, errno.ENOTTY, errno.ENOSYS})


def _pread_nowait_py(fd: int, offset: int, length: int) -> bytes | None:
    """The bytes if the page cache holds the whole range, else None: into a bytearray
    with preadv2(RWF_NOWAIT), then a copy to bytes (the C extension copies once)."""
    buf = bytearray(length)
    try:
        got = os.preadv(fd, [buf], offset, os.RWF_NOWAIT)
    except BlockingIOError:
        return None
    return bytes(buf) if got == length else None


def _cached_reader() -> Callable[[int, int, int], bytes | None]:
    try:
        from ._uring import pread_nowait  # noqa: PLC0415 - the optional extension
    except ImportError:  # the extension is not built here
        return _pread_nowait_py
    return pread_nowait


_pread_cached = _cached_reader()


async def _until_done(request: Awaitable[None]) -> None:
    """Awaits an engine request that uses the caller's buffer.  A cancellation is held
    back until the request is done: the kernel (or a worker thread) may read or fill
    the buffer until then, and the caller reuses it once this returns or raises."""
    fut = asyncio.ensure_future(request)
    try:
        await asyncio.shield(fut)
    except asyncio.CancelledError:
        while not fut.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait((fut,))
        if not fut.cancelled():
            fut.exception()  # its caller is gone: a failure is no one's news (not logged)
        raise


def _byte_view(data: bytes | bytearray | memoryview) -> memoryview:
    """A flat memoryview of bytes over data (copying only a non-contiguous view)."""
    mv = memoryview(data)
    if not mv.c_contiguous:
        return memoryview(mv.tobytes())
    if mv.ndim == 1 and mv.itemsize == 1 and mv.format in ("B", "b", "c"):
        return mv
    return mv.cast("B")


class Volume:
    """An open volume.  ``kind`` is "file" or "block"; ``size`` is in bytes.

    All I/O is asynchronous and raises StorageError; requests of any size and
    alignment work, and at most ``engine.depth`` operations are in flight.
    """

    path: str
    size: int
    block_size: int
    read_only: bool
    kind: str
    thin: bool

    def __init__(
        self,
        path: str,
        opened: _sys.OpenedFiles,
        read_only: bool,
        engine: Engine,
        direct_io: DirectIo = "all",
    ):
        self.path = path
        self.size = opened.size
        self.block_size = opened.block_size
        self.read_only = read_only
        self.kind = opened.kind
        self.thin = opened.thin
        self._engine = engine
        self._counts = engine.counts  # what this volume's requests did, added up
        self._h = Handle(opened.fd, opened.dfd, opened.align, direct_io)
        self._nowait = hasattr(os, "RWF_NOWAIT")
        self._nowait_skip = 0  # reads left before the page cache is tried again
        self._nowait_backoff = 1
        self.writeback = False
        """Start writing written pages back early (sync_file_range WRITE over the span
        of every WRITEBACK_EVERY bytes written), so dirty data does not pile up in the
        page cache until a flush has to write it all (a volume written at network
        speed by a copy); no effect with O_DIRECT."""
        self._dirty = 0  # bytes written since the last writeback started
        self._dirty_lo = self._dirty_hi = 0
        self._finalizer = weakref.finalize(self, self._h.close)

    def __repr__(self) -> str:
        mode = "ro" if self.read_only else "rw"
        state = " closed" if self.closed else ""
        return f"<Volume {self.path!r} {self.kind} {self.size} bytes {mode}{state}>"

    @property
    def closed(self) -> bool:
        return self._h.closed

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def direct(self) -> bool:
        """Whether some aligned requests use O_DIRECT (see :data:`DirectIo`)."""
        return self._h.dfd >= 0

    @property
    def direct_reads(self) -> bool:
        """Whether aligned reads use O_DIRECT (so the page cache is not tried first)."""
        return self._h.dfd >= 0 and self._h.read_min == 0

    def fileno(self) -> int:
        """The descriptor of its page-cache I/O, which a data segment is sent from
        (sendfile); -1 once the volume is closed."""
        return -1 if self.closed else self._h.fd

    def change_mark(self) -> ChangeMark:
        """What tells whether the volume was written since (see :mod:`._changes`)."""
        self._check("stat", 0, 0)
        try:
            return change_mark(self._h.fd)
        except OSError as exc:
            raise from_os_error(exc, "stat", self.path) from exc

    def close(self) -> None:
        """Closes the volume; its descriptors close when requests in flight are done."""
        self._finalizer()

    async def __aenter__(self) -> Volume:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- checks

    def _check(self, op: str, offset: int, length: int, *, write: bool = False) -> None:
        if self._h.closed:
            raise storage_error(errno.EBADF, op, self.path, "volume is closed")
        if write and self.read_only:
            raise storage_error(errno.EROFS, op, self.path, "volume is read-only")
        if offset < 0 or length < 0 or offset + length > self.size:
            detail = f"range {offset}+{length} is outside the volume (size {self.size})"
            raise storage_error(errno.EINVAL, op, self.path, detail)

    def _error(self, op: str, exc: OSError) -> StorageError:
        return from_os_error(exc, op, self.path)

    # -- data

    async def read(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset``.

        A read the page cache can serve whole is done at once with
        preadv2(RWF_NOWAIT), which never blocks: no trip through the engine and
        the event loop.  Anything else (not cached, O_DIRECT) goes to the engine.
        After a miss the next reads skip the attempt, twice as many after each
        further miss (up to NOWAIT_BACKOFF_MAX): an uncached workload pays for
        few wasted system calls.
        """
        if offset < 0 or length <= 0 or offset + length > self.size or self._h.closed:
            self._check("read", offset, length)  # raises, unless length is 0
            return b""
        cached = self.read_cached(offset, length)
        if cached is not None:
            return cached
        try:
            data = await self._engine._read(self._h, offset, length)
        except OSError as exc:
            raise self._error("read", exc) from exc
        self._count_read(length)
        return data

    def _count_read(self, length: int) -> None:
        """One read of ``length`` bytes done, in the engine's counts."""
        counts = self._counts
        counts.reads += 1
        counts.read_bytes += length

    def read_cached(self, offset: int, length: int) -> bytes | None:
        """The bytes at ``offset`` if the page cache holds them all, else None;
        never blocks (preadv2 with RWF_NOWAIT).  Out-of-range requests get None."""
        if not (self._nowait and 0 < length <= NOWAIT_MAX and not self.direct_reads):
            return None
        if offset < 0 or offset + length > self.size or self._h.closed or self._engine.closed:
            return None
        if self._nowait_skip:
            self._nowait_skip -= 1
            return None
        try:
            cached = _pread_cached(self._h.fd, offset, length)
        except OSError as exc:
            self._cannot_read_cached(exc)
            cached = None
        if cached is not None:
            self._nowait_backoff = 1
            self._counts.cached_reads += 1
            self._count_read(length)
            return cached
        self._cache_missed()
        return None

    def _cache_missed(self) -> None:
        """A read the page cache did not hold: skip the next cached attempts, twice as
        many after each miss (up to NOWAIT_BACKOFF_MAX)."""
        self._nowait_skip = self._nowait_backoff
        self._nowait_backoff = min(2 * self._nowait_backoff, NOWAIT_BACKOFF_MAX)

    def _cannot_read_cached(self, exc: OSError) -> None:
        """A cached read failed: where the file system or device cannot do RWF_NOWAIT
        reads, stop trying them; any other error is left to the ordinary read."""
        if exc.errno in _UNSUPPORTED or exc.errno == errno.EINVAL:
            self._nowait = False

    def _readinto_cached(self, offset: int, view: memoryview) -> int:
        """How many bytes of ``view`` the page cache filled at once (preadv2 with
        RWF_NOWAIT, with the same backoff after misses as :meth:`read_cached`)."""
        if not (self._nowait and len(view) <= NOWAIT_MAX and not self.direct_reads):
            return 0
        if self._engine.closed:
            return 0
        if self._nowait_skip:
            self._nowait_skip -= 1
            return 0
        try:
            got = os.preadv(self._h.fd, [view], offset, os.RWF_NOWAIT)
        except BlockingIOError:
            got = 0
        except OSError as exc:
            self._cannot_read_cached(exc)
            return 0
        if got == len(view):
            self._nowait_backoff = 1
        else:
            self._cache_missed()
        return got

    async def readinto(self, offset: int, buf: memoryview) -> None:
        """Fills ``buf`` (writable, contiguous) from ``offset``."""
        view = memoryview(buf)
        if view.readonly or not view.c_contiguous:
            raise ValueError("readinto needs a writable contiguous buffer")
        view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        self._check("read", offset, len(view))
        if not len(view):
            return
        got = self._readinto_cached(offset, view)
        if got == len(view):
            self._counts.cached_reads += 1
            self._count_read(got)
            return
        try:
            await _until_done(self._engine._readinto(self._h, offset + got, view[got:]))
        except OSError as exc:
            raise self._error("read", exc) from exc
        self._count_read(len(view))

    async def hash_range(self, offset: int, length: int, hasher: Hasher) -> None:
        """Feeds ``length`` bytes at ``offset``, as stored (holes read as zeros), to
        ``hasher.update`` in order, in a worker thread; read back with O_DIRECT where
        the volume has an O_DIRECT descriptor (see :mod:`._read_back`)."""
        self._check("read", offset, length)
        if not length:
            return
        try:
            await self._engine._hash_range(self._h, offset, length, hasher)
        except OSError as exc:
            raise self._error("read", exc) from exc
        self._count_read(length)

    async def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Writes all of ``data`` at ``offset``; ``data`` must not change until this
        returns or raises (a cancelled write returns once storage is done with it)."""
        view = _byte_view(data)
        self._check("write", offset, len(view), write=True)
        if not len(view):
            return
        try:
            await _until_done(self._engine._write(self._h, offset, view))
        except OSError as exc:
            raise self._error("write", exc) from exc
        self._counts.writes += 1
        self._counts.written_bytes += len(view)
        if self._h.direct_write(offset, len(view)):
            self._counts.direct_written_bytes += len(view)
        elif self.writeback:
            self._wrote(offset, len(view))

    def _wrote(self, offset: int, length: int) -> None:
        if self._dirty == 0:
            self._dirty_lo, self._dirty_hi = offset, offset + length
        else:
            self._dirty_lo = min(self._dirty_lo, offset)
            self._dirty_hi = max(self._dirty_hi, offset + length)
        self._dirty += length
        if self._dirty < WRITEBACK_EVERY or self._h.closed:
            return
        span = self._dirty_hi - self._dirty_lo
        started = asyncio.ensure_future(self._engine._writeback(self._h, self._dirty_lo, span))
        started.add_done_callback(_quiet)
        self._dirty = 0

    async def flush(self) -> None:
        """fdatasync: completed writes reach stable storage."""
        self._check("flush", 0, 0)
        try:
            await self._engine._fdatasync(self._h)
        except OSError as exc:
            raise self._error("flush", exc) from exc
        self._counts.flushes += 1

    async def refresh_size(self) -> int:
        """Re-reads the size (after the file or device was resized) and returns it."""
        self._check("refresh_size", 0, 0)
        try:
            self.size = await self._engine._call_fd(self._h, _sys.current_size)
        except OSError as exc:
            raise self._error("refresh_size", exc) from exc
        return self.size

    # -- provisioning

    async def discard(self, offset: int, length: int) -> None:
        """Deallocates a range (punch hole / BLKDISCARD); EOPNOTSUPP where unsupported."""
        self._check("discard", offset, length, write=True)
        if not length:
            return
        try:
            if self.kind == "block":
                await self._ioctl(_sys.BLKDISCARD, offset, length)
            else:
                mode = _sys.FALLOC_FL_PUNCH_HOLE | _sys.FALLOC_FL_KEEP_SIZE
                await self._engine._fallocate(self._h, mode, offset, length)
        except OSError as exc:
            if exc.errno in _UNSUPPORTED:
                raise storage_error(errno.EOPNOTSUPP, "discard", self.path) from exc
            raise self._error("discard", exc) from exc
        self._counts.discards += 1

    async def write_zeroes(self, offset: int, length: int) -> None:
        """Zeroes a range: ZERO_RANGE / BLKZEROOUT, else by writing zeros."""
        self._check("write_zeroes", offset, length, write=True)
        if not length:
            return
        try:
            if not await self._zero_range(offset, length):
                await self._write_zero_blocks(offset, length)
        except OSError as exc:
            raise self._error("write_zeroes", exc) from exc
        self._counts.zeroings += 1

    async def _zero_range(self, offset: int, length: int) -> bool:
        """The efficient way to zero; False where the volume cannot do it."""
        try:
            if self.kind == "block":
                await self._ioctl(_sys.BLKZEROOUT, offset, length)
            else:
                mode = _sys.FALLOC_FL_ZERO_RANGE | _sys.FALLOC_FL_KEEP_SIZE
                await self._engine._fallocate(self._h, mode, offset, length)
        except OSError as exc:
            if exc.errno in _UNSUPPORTED or exc.errno == errno.EINVAL:
                return False
            raise
        return True

    async def _write_zero_blocks(self, offset: int, length: int) -> None:
        end = offset + length
        for pos in range(offset, end, ZERO_CHUNK):
            await self._engine._write(self._h, pos, _ZEROS[: min(ZERO_CHUNK, end - pos)])

    async def _ioctl(self, request: int, offset: int, length: int) -> None:
        await self._engine._call_fd(self._h, _sys.blk_range_ioctl, request, offset, length)

    async def mapped_extents(self, offset: int, length: int) -> list[tuple[int, int, bool]]:
        """(offset, length, mapped) extents covering the range, in order."""
        self._check("mapped_extents", offset, length)
        if not length:
            return []
        if self.kind == "block":
            return [(offset, length, True)]
        try:
            return await self._engine._call_fd(self._h, _sys.file_extents, offset, length)
        except OSError as exc:
            raise self._error("mapped_extents", exc) from exc


def _close_opened(fut: asyncio.Future[_sys.OpenedFiles]) -> None:
    """Closes what an abandoned open produced."""
    if fut.cancelled() or fut.exception() is not None:
        return
    opened = fut.result()
    Handle(opened.fd, opened.dfd, 1).close()


def _quiet(done: asyncio.Future[None]) -> None:
    """Writeback is a hint: a failure shows at the next flush, not here."""
    if not done.cancelled():
        done.exception()


async def open_volume(
    path: str | os.PathLike[str],
    *,
    read_only: bool = False,
    engine: Engine | None = None,
    direct: bool | DirectIo = True,
) -> Volume:
    """Opens a regular file or block device.

    ``engine`` None uses the running loop's shared default engine.  ``direct`` says
    which aligned requests use O_DIRECT where the engine and filesystem allow it
    (:data:`DirectIo`; True is "all", False "none").
    """
    name = os.fspath(path)
    eng = engine if engine is not None else default_engine()
    policy: DirectIo = "all" if direct is True else "none" if direct is False else direct
    use_direct = policy != "none" and eng.uses_direct
    try:
        fut = asyncio.ensure_future(eng._call(_sys.open_files, name, read_only, use_direct))
        try:
            opened = await asyncio.shield(fut)
        except asyncio.CancelledError:
            fut.add_done_callback(_close_opened)
            raise
    except OSError as exc:
        raise from_os_error(exc, "open", name) from exc
    return Volume(name, opened, read_only, eng, policy)
