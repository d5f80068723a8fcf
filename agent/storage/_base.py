"""What both backends share: the Engine interface and the Handle of an open volume."""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, TypeVar, TypeVarTuple

from . import _read_back
from ._counts import IoCounts
from ._read_back import Hasher

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# O_DIRECT alignment used after the filesystem refused a smaller one with EINVAL.
SAFE_DIRECT_ALIGN = 4096
BULK_WRITE = 256 << 10  # the smallest write that bypasses the page cache under "bulk-writes"
_NEVER = 1 << 62

DirectIo = Literal["none", "bulk-writes", "all"]
"""Which requests of a volume bypass the page cache (O_DIRECT), when aligned:
none; writes of BULK_WRITE bytes or more (a copy's data segments: no copy into the
page cache, and none of it evicted for them) while every read and small write goes
through the cache; or every aligned request."""


class Handle:
    """The descriptors of one open volume.

    Every request holds the handle while the kernel may still use its
    descriptors; close() closes them once the last request is done, so a
    descriptor number is never reused under a request still queued for it.
    ``dfd`` is the O_DIRECT descriptor (-1 for none): reads of at least ``read_min``
    bytes and writes of at least ``write_min`` bytes whose offset and length are
    multiples of ``dmask + 1`` use it; the others use the buffered ``fd``.

    acquire/release are for the event loop's thread and take no lock (they are
    on the path of every io_uring request); acquire_shared/release_shared may be
    called from any thread.  Each side publishes its own count or flag before
    reading the other's, so with the GIL's ordering either close() sees a user
    or the user sees the close.  close() belongs to the event loop's thread too.
    """

    __slots__ = (
        "_closing",
        "_dfd_open",
        "_fds_closed",
        "_lock",
        "_shared",
        "_users",
        "dfd",
        "dmask",
        "fd",
        "read_min",
        "write_min",
    )

    def __init__(self, fd: int, dfd: int, align: int, direct_io: DirectIo = "all"):
        self.fd = fd
        self.dfd = dfd
        self.dmask = align - 1
        self.read_min = 0 if direct_io == "all" else _NEVER
        self.write_min = 0 if direct_io == "all" else BULK_WRITE
        self._dfd_open = dfd
        self._users = 0  # requests of the loop thread
        self._shared = 0  # requests of worker threads, under _lock
        self._closing = False
        self._fds_closed = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._closing

    def acquire(self) -> None:
        """Marks a request using the descriptors; OSError(EBADF) once closing."""
        self._users += 1  # publish first, then look: pairs with close()
        if self._closing:
            self.release()
            raise OSError(errno.EBADF, "volume is closed")

    def release(self) -> None:
        self._users -= 1
        if self._closing and not self._users:
            self._close_if_idle()

    def acquire_shared(self) -> None:
        """acquire() for a request whose release happens in another thread."""
        with self._lock:
            if self._closing:
                raise OSError(errno.EBADF, "volume is closed")
            self._shared += 1

    def release_shared(self) -> None:
        with self._lock:
            self._shared -= 1
        if self._closing:
            self._close_if_idle()

    def close(self) -> None:
        """Closes now, or when the last request in flight is done."""
        self._closing = True
        self._close_if_idle()

    def direct_read(self, offset: int, length: int) -> bool:
        """Whether this read goes to the O_DIRECT descriptor."""
        return self.dfd >= 0 and length >= self.read_min and not (offset | length) & self.dmask

    def direct_write(self, offset: int, length: int) -> bool:
        """Whether this write goes to the O_DIRECT descriptor."""
        return self.dfd >= 0 and length >= self.write_min and not (offset | length) & self.dmask

    def direct_refused(self, used_mask: int) -> None:
        """O_DIRECT I/O failed with EINVAL: demand 4 KiB alignment, then give up on it."""
        if used_mask != self.dmask:
            return  # already adjusted by another request
        if self.dmask + 1 < SAFE_DIRECT_ALIGN:
            self.dmask = SAFE_DIRECT_ALIGN - 1
        else:
            self.dfd = -1

    def _close_if_idle(self) -> None:
        with self._lock:
            if self._users or self._shared or self._fds_closed:
                return
            self._fds_closed = True
            fds = (self.fd, self._dfd_open)
            self.fd = self.dfd = self._dfd_open = -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)


def _holding(
    h: Handle, executor: ThreadPoolExecutor, fn: Callable[[*Ts], T], *args: *Ts
) -> Awaitable[T]:
    """fn(*args) in a thread of ``executor``, the handle held from now until it is done."""
    loop = asyncio.get_running_loop()
    h.acquire_shared()
    try:
        job = executor.submit(fn, *args)
    except BaseException:
        h.release_shared()
        raise
    job.add_done_callback(lambda _: h.release_shared())
    return asyncio.wrap_future(job, loop=loop)


class Engine:
    """Runs the I/O of volumes: ``kind`` is "io_uring" or "threads".

    The underscored methods are the interface Volume uses: each starts a request
    and returns an awaitable (a future) of its result; they raise OSError.  An
    io_uring engine serves one event loop at a time.  ``counts``: what its volumes'
    requests did (:class:`IoCounts`, for the agent's metrics).
    """

    kind: str = ""
    uses_direct: bool = False  # whether volumes should open an O_DIRECT descriptor

    def __init__(self, depth: int):
        if depth < 1:
            raise ValueError("depth must be at least 1")
        self.depth = depth
        self.counts = IoCounts()
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None
        self._read_back: ThreadPoolExecutor | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    def arena(self) -> memoryview | None:
        """Memory this engine writes from without a copy of its own (io_uring's
        registered arena), or None."""
        return None

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"depth={self.depth}"
        return f"<{type(self).__name__} {self.kind} {state}>"

    def close(self) -> None:
        """Stops the engine: new requests fail with ESHUTDOWN, those in flight finish.

        io_uring: waits for the operations on the ring; requests still in the
        backlog fail.  Call it from the event loop's thread (or after the loop).
        """
        if self._closed:
            return
        self._closed = True
        for executor in (self._executor, self._read_back):
            if executor is not None:
                executor.shutdown(wait=False)

    def _check_open(self) -> None:
        if self._closed:
            raise OSError(errno.ESHUTDOWN, "storage engine is closed")

    def _blocking_executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=4, thread_name_prefix=f"storage-{self.kind}"
            )
        return self._executor

    def _call(self, fn: Callable[[*Ts], T], *args: *Ts) -> Awaitable[T]:
        """Runs a blocking function (open, ioctl, lseek) in a worker thread."""
        self._check_open()
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._blocking_executor(), functools.partial(fn, *args))

    def _call_fd(self, h: Handle, fn: Callable[[int, *Ts], T], *args: *Ts) -> Awaitable[T]:
        """Runs fn(fd, *args) in a worker thread, holding the handle until it is done.

        The handle is taken now, so a request made before Volume.close() runs
        with the descriptor open, and let go even if the job is cancelled.
        """
        self._check_open()
        return _holding(h, self._blocking_executor(), fn, h.fd, *args)

    def _hash_range(self, h: Handle, offset: int, length: int, hasher: Hasher) -> Awaitable[None]:
        """Feeds the range, read back from storage, to ``hasher`` in a worker thread of
        its own pool (see :mod:`._read_back`), holding the handle until it is done."""
        self._check_open()
        if self._read_back is None:
            self._read_back = ThreadPoolExecutor(
                max_workers=_read_back.WORKERS, thread_name_prefix="storage-read-back"
            )
        return _holding(h, self._read_back, _read_back.hash_range, h, offset, length, hasher)

    def _read(self, h: Handle, offset: int, length: int) -> Awaitable[bytes]:
        raise NotImplementedError

    def _readinto(self, h: Handle, offset: int, buf: memoryview) -> Awaitable[None]:
        raise NotImplementedError

    def _write(self, h: Handle, offset: int, data: memoryview) -> Awaitable[None]:
        raise NotImplementedError

    def _fdatasync(self, h: Handle) -> Awaitable[None]:
        raise NotImplementedError

    def _fallocate(self, h: Handle, mode: int, offset: int, length: int) -> Awaitable[None]:
        raise NotImplementedError

    def _writeback(self, h: Handle, offset: int, length: int) -> Awaitable[None]:
        """Starts writeback of the range's dirty pages (sync_file_range WRITE), not
        waiting for it."""
        raise NotImplementedError
