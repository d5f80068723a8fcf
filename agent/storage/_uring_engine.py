"""The "io_uring" backend: requests on a liburing ring, completions on the event loop.

Flow: a request becomes one or more operations of at most ``bufsize`` bytes
(128 KiB), each using one ring slot and that slot's registered buffer
(READ_FIXED/WRITE_FIXED), except an O_DIRECT write: operations of at most
WRITE_PART bytes that the kernel reads from the caller's buffer itself (no copy;
through slot buffers only where the caller's memory is not aligned as O_DIRECT
needs).  A buffered write is copied into slot buffers on purpose: the kernel copies
a registered buffer into the page cache so much faster than the caller's memory
that the copy pays for itself (target CPU of a verified copy to a page-cache LUN:
1.4-1.6 s/GB through slot buffers, 1.75-1.9 s/GB in place).

Operations prepared during one event-loop iteration are submitted together by a
single io_uring_enter scheduled with call_soon ("batch"); completions the kernel
finished inline are reaped right after it, the others when the ring's eventfd
(watched with loop.add_reader) becomes readable.  At most ``depth`` operations
are in flight; more wait in a FIFO backlog.

O_DIRECT: an operation whose offset and length are multiples of the volume's
direct alignment (the larger of the page size and the device's logical block
size), and which the volume's policy sends there (every one, or only writes of
BULK_WRITE bytes and more: see Handle), goes to the O_DIRECT descriptor (slot
buffers are page aligned); any other goes to the buffered one.  Linux keeps the
two coherent: a direct read first writes back dirty cached pages of its range and
a direct write invalidates them afterwards.  Because direct requests cover whole
pages, a buffered request never shares a page with a direct one it does not
overlap, so mixing is safe for requests that do not overlap while in flight (the
SCSI layer above gives no ordering for overlapping commands in flight either).
Short transfers are continued from where they stopped; a direct operation refused
with EINVAL is retried buffered and direct I/O tightened or given up for that
volume.
"""

from __future__ import annotations

import asyncio
import errno
import os
import weakref
from collections import deque
from collections.abc import Awaitable

from . import _sys, _uring
from ._base import Engine, Handle

BUF_SIZE = 128 * 1024
WRITE_PART = 1 << 20  # the largest O_DIRECT write operation (written in place)
_RETRY_SUBMIT = (errno.EAGAIN, errno.EBUSY, errno.EINTR)


def _errno_error(res: int) -> OSError:
    return OSError(-res, os.strerror(-res))


def _settle(
    fut: asyncio.Future[bytes] | asyncio.Future[None],
    result: bytes | None,
    exc: BaseException | None,
) -> None:
    """Resolves fut unless it was cancelled meanwhile or its loop is gone."""
    if fut.done():
        return
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)  # type: ignore[arg-type]
    except RuntimeError:  # its event loop is closed
        pass


class _Req:
    """A caller's request split into ``pending`` operations; resolves when all are done."""

    __slots__ = ("error", "fut", "h", "pending")

    def __init__(self, fut: asyncio.Future[None], h: Handle, pending: int):
        self.fut = fut
        self.h = h
        self.pending = pending
        self.error: OSError | None = None

    def part_done(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.h.release()
            _settle(self.fut, None, self.error)

    def part_failed(self, exc: OSError) -> None:
        if self.error is None:
            self.error = exc
        self.part_done()


class _Op:
    """One ring operation."""

    __slots__ = ()

    def prep(self, ring: _uring.Ring[_Op]) -> None:
        raise NotImplementedError

    def complete(self, eng: UringEngine, res: int, data: bytes | None) -> None:
        raise NotImplementedError

    def fail(self, exc: OSError) -> None:
        raise NotImplementedError


class _RwOp(_Op):
    """A read or write of [offset, offset + length) on a volume."""

    __slots__ = ("h", "length", "mask", "offset")
    writes = False

    def __init__(self, h: Handle, offset: int, length: int):
        self.h = h
        self.offset = offset
        self.length = length
        self.mask = -1

    def fd(self) -> int:
        """The O_DIRECT descriptor if the handle sends this request there (aligned,
        and large enough), else the buffered one."""
        h = self.h
        direct = h.direct_write if self.writes else h.direct_read
        if direct(self.offset, self.length):
            self.mask = h.dmask
            return h.dfd
        self.mask = -1
        return h.fd

    def advance(self, done: int) -> None:
        self.offset += done
        self.length -= done

    def failed(self, eng: UringEngine, res: int) -> None:
        """res < 0: retry a direct operation refused with EINVAL buffered, else fail."""
        if res == -errno.EINVAL and self.mask >= 0:
            self.h.direct_refused(self.mask)
            eng._submit(self)
        else:
            self.fail(_errno_error(res))


class _ReadOp(_RwOp):
    """A read of at most bufsize bytes returned as bytes."""

    __slots__ = ("fut", "parts")

    def __init__(self, h: Handle, offset: int, length: int, fut: asyncio.Future[bytes]):
        self.h = h  # _RwOp.__init__ inlined: the hot path of 4 KiB reads
        self.offset = offset
        self.length = length
        self.mask = -1
        self.fut = fut
        self.parts: list[bytes] | None = None

    def prep(self, ring: _uring.Ring[_Op]) -> None:
        h = self.h  # self.fd() inlined: the hot path of 4 KiB reads
        if h.dfd >= 0 and self.length >= h.read_min and not (self.offset | self.length) & h.dmask:
            self.mask = h.dmask
            ring.read(h.dfd, self.offset, self.length, self)
        else:
            self.mask = -1
            ring.read(h.fd, self.offset, self.length, self)

    def complete(self, eng: UringEngine, res: int, data: bytes | None) -> None:
        if res == self.length and data is not None:
            if self.parts is not None:
                data = b"".join([*self.parts, data])
            self.h.release()
            fut = self.fut
            if not fut.done():
                try:  # noqa: SIM105 (contextlib.suppress costs more on this hot path)
                    fut.set_result(data)
                except RuntimeError:  # its event loop is closed
                    pass
        elif res > 0 and data is not None:
            self.parts = [*(self.parts or ()), data]
            self.advance(res)
            eng._submit(self)
        elif res == 0:
            self.fail(OSError(errno.EIO, "unexpected end of file"))
        else:
            self.failed(eng, res)

    def fail(self, exc: OSError) -> None:
        self.h.release()
        _settle(self.fut, None, exc)


class _PartOp(_RwOp):
    """A part of a _Req."""

    __slots__ = ("req",)

    def __init__(self, req: _Req, offset: int, length: int):
        super().__init__(req.h, offset, length)
        self.req = req

    def fail(self, exc: OSError) -> None:
        self.req.part_failed(exc)

    def complete(self, eng: UringEngine, res: int, data: bytes | None) -> None:
        """Done, or a short transfer: resubmit the rest."""
        if res == self.length:
            self.req.part_done()
        elif res > 0:
            self.consumed(res)
            self.advance(res)
            eng._submit(self)
        elif res == 0:
            self.fail(OSError(errno.EIO, "no progress (end of file?)"))
        else:
            self.failed(eng, res)

    def consumed(self, done: int) -> None:
        """Drop the first ``done`` bytes of this part's buffer."""
        raise NotImplementedError


class _ReadIntoOp(_PartOp):
    __slots__ = ("dest",)

    def __init__(self, req: _Req, offset: int, dest: memoryview):
        super().__init__(req, offset, len(dest))
        self.dest = dest

    def prep(self, ring: _uring.Ring[_Op]) -> None:
        ring.read(self.fd(), self.offset, self.length, self, self.dest)

    def consumed(self, done: int) -> None:
        self.dest = self.dest[done:]


class _WriteOp(_PartOp):
    __slots__ = ("src",)
    writes = True

    def __init__(self, req: _Req, offset: int, src: memoryview):
        super().__init__(req, offset, len(src))
        self.src = src

    def prep(self, ring: _uring.Ring[_Op]) -> None:
        fd = self.fd()
        if ring.write_registered(fd, self.offset, self.src, self):
            return  # from the registered arena, as it is
        if self.mask >= 0 and ring.write_in_place(fd, self.offset, self.src, self, self.mask + 1):
            return
        # Buffered, or unaligned memory for O_DIRECT: through a slot buffer, at most
        # bufsize of it now (the rest follows as after a short write).
        ring.write(fd, self.offset, self.src[: ring.bufsize], self)

    def consumed(self, done: int) -> None:
        self.src = self.src[done:]


class _SyncOp(_Op):
    """fdatasync, or fallocate when ``mode`` is set."""

    __slots__ = ("length", "mode", "offset", "req")

    def __init__(self, req: _Req, mode: int | None = None, offset: int = 0, length: int = 0):
        self.req = req
        self.mode = mode
        self.offset = offset
        self.length = length

    def prep(self, ring: _uring.Ring[_Op]) -> None:
        if self.mode is None:
            ring.fsync(self.req.h.fd, self)
        else:
            ring.fallocate(self.mode, self.req.h.fd, self.offset, self.length, self)

    def complete(self, eng: UringEngine, res: int, data: bytes | None) -> None:
        if res < 0:
            self.fail(_errno_error(res))
        else:
            self.req.part_done()

    def fail(self, exc: OSError) -> None:
        self.req.part_failed(exc)


class _WritebackOp(_SyncOp):
    """sync_file_range(SYNC_FILE_RANGE_WRITE) of ``offset``, ``length``."""

    __slots__ = ()

    def prep(self, ring: _uring.Ring[_Op]) -> None:
        flags = _sys.SYNC_FILE_RANGE_WRITE
        ring.sync_file_range(self.req.h.fd, self.offset, self.length, flags, self)


class UringEngine(Engine):
    """io_uring backend.

    ``submit`` chooses when io_uring_enter runs: "batch" (default) once per
    event-loop iteration for everything prepared in it, "immediate" for each
    operation, "adaptive" at once when the ring was idle, else batched.
    """

    kind = "io_uring"
    uses_direct = True

    def __init__(
        self, depth: int = 64, *, bufsize: int = BUF_SIZE, submit: str = "batch", arena: int = 0
    ):
        super().__init__(depth)
        if submit not in ("batch", "immediate", "adaptive"):
            raise ValueError(f"unknown submit mode {submit!r}")
        self._ring: _uring.Ring[_Op] = _uring.Ring(depth, bufsize, arena)
        self._bufsize = bufsize
        self._mode = submit
        self._inflight = 0
        self._backlog: deque[_Op] = deque()
        self._bound: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._flush_scheduled = False

    @property
    def fixed_buffers(self) -> bool:
        """Whether the buffer pool is registered (READ_FIXED/WRITE_FIXED are used)."""
        return self._ring.fixed

    def arena(self) -> memoryview | None:
        """The ring's registered arena: a write from it goes to the kernel as it is
        (WRITE_FIXED), without the copy into a slot buffer (None: no arena, or the
        kernel would not register it)."""
        return memoryview(self._ring) if self._ring.arena_fixed else None

    # -- event loop binding

    def _loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, watching the ring's eventfd (checked on every request)."""
        if self._closed:
            self._check_open()
        loop = asyncio.get_running_loop()
        bound = self._bound
        if bound is None or bound() is not loop:
            self._attach(loop)
        return loop

    def _attach(self, loop: asyncio.AbstractEventLoop) -> None:
        old = self._bound() if self._bound is not None else None
        if old is not None and not old.is_closed():
            raise RuntimeError("storage engine is in use by another event loop")
        loop.add_reader(self._ring.fileno(), self._reap)
        self._bound = weakref.ref(loop)

    def _detach(self) -> None:
        loop = self._bound() if self._bound is not None else None
        self._bound = None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._ring.fileno())

    def close(self) -> None:
        if self._closed:
            return
        super().close()
        self._detach()
        backlog = list(self._backlog)
        self._backlog.clear()
        completions = self._ring.close()  # waits for the operations in flight
        self._inflight = 0
        for op, res, data in completions:
            op.complete(self, res, data)
        for op in backlog:
            op.fail(OSError(errno.ESHUTDOWN, "storage engine is closed"))

    # -- submission and completion

    def _submit(self, op: _Op) -> None:
        """Prepares op on the ring (or queues it when depth are in flight)."""
        if self._inflight >= self.depth or self._closed:
            if self._closed:
                op.fail(OSError(errno.ESHUTDOWN, "storage engine is closed"))
            else:
                self._backlog.append(op)
            return
        try:
            op.prep(self._ring)
        except Exception as exc:  # the op must end, or its request never resolves
            op.fail(exc if isinstance(exc, OSError) else OSError(errno.EINVAL, repr(exc)))
            return
        self._inflight += 1
        if self._flush_scheduled:
            return
        if self._mode == "batch" or (self._mode == "adaptive" and self._inflight > 1):
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        else:
            self._enter()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._closed:
            self._enter()
            self._reap()

    def _enter(self) -> None:
        try:
            self._ring.submit()
        except OSError as exc:
            if exc.errno not in _RETRY_SUBMIT:
                raise
            self._flush_scheduled = True  # completions free room: try again soon
            asyncio.get_running_loop().call_soon(self._flush)

    def _reap(self) -> None:
        """Completes what the kernel finished; the eventfd reader callback."""
        if self._closed:
            return
        completions = self._ring.reap()
        if not completions:
            return
        self._inflight -= len(completions)
        for op, res, data in completions:
            op.complete(self, res, data)
        backlog = self._backlog
        while backlog and self._inflight < self.depth:
            self._submit(backlog.popleft())

    # -- the Engine interface

    def _new_req(self, h: Handle, parts: int) -> _Req:
        loop = self._loop()
        h.acquire()
        return _Req(loop.create_future(), h, parts)

    def _parts(self, offset: int, buf: memoryview, size: int = 0) -> list[tuple[int, memoryview]]:
        size = size or self._bufsize
        return [(offset + pos, buf[pos : pos + size]) for pos in range(0, len(buf), size)]

    def _read(self, h: Handle, offset: int, length: int) -> Awaitable[bytes]:
        if length > self._bufsize:
            return self._read_large(h, offset, length)
        fut: asyncio.Future[bytes] = self._loop().create_future()
        h.acquire()
        self._submit(_ReadOp(h, offset, length, fut))
        return fut

    async def _read_large(self, h: Handle, offset: int, length: int) -> bytes:
        buf = bytearray(length)
        await self._readinto(h, offset, memoryview(buf))
        return bytes(buf)

    def _readinto(self, h: Handle, offset: int, buf: memoryview) -> Awaitable[None]:
        parts = self._parts(offset, buf)
        req = self._new_req(h, len(parts))
        for off, dest in parts:
            self._submit(_ReadIntoOp(req, off, dest))
        return req.fut

    def _write(self, h: Handle, offset: int, data: memoryview) -> Awaitable[None]:
        direct = h.direct_write(offset, len(data))
        whole = direct or self._ring.registered(data)  # no slot buffer in between
        parts = self._parts(offset, data, WRITE_PART if whole else self._bufsize)
        req = self._new_req(h, len(parts))
        for off, src in parts:
            self._submit(_WriteOp(req, off, src))
        return req.fut

    def _fdatasync(self, h: Handle) -> Awaitable[None]:
        req = self._new_req(h, 1)
        self._submit(_SyncOp(req))
        return req.fut

    def _fallocate(self, h: Handle, mode: int, offset: int, length: int) -> Awaitable[None]:
        req = self._new_req(h, 1)
        self._submit(_SyncOp(req, mode, offset, length))
        return req.fut

    def _writeback(self, h: Handle, offset: int, length: int) -> Awaitable[None]:
        req = self._new_req(h, 1)
        self._submit(_WritebackOp(req, None, offset, length))
        return req.fut
