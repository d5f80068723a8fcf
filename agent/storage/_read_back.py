"""Reading a range back from storage in a worker thread, to hash it (verification).

A volume with an O_DIRECT descriptor (every aligned request direct, or only its
bulk writes, which are what a copy wrote) is read back with O_DIRECT: what storage
holds, with no page-cache copy.  A page-cache volume is read back through the page cache, where
its writes are (made durable by the flush that ends a copy): an O_DIRECT read of it
would first wait for the writeback of the range's dirty pages and then read the disk,
which on a 2 GiB verified copy cut the throughput by 40% and saved no CPU.  A direct
read refused with EINVAL, or short at an unaligned offset, goes on buffered.

Reads through the page cache are of CHUNK bytes, so the hasher finds them in the
CPU's cache; direct reads of DIRECT_CHUNK, which the device serves faster (8 threads
reading back a 4 GiB LUN written by a copy: 1.18-1.34 GB/s in 1 MiB reads, 1.76-1.79
GB/s in 4 MiB reads, at the same CPU per GB).
Each worker thread reads into its own page-aligned buffer, reused for every range,
and feeds it to the hasher: the event loop hands over one range and gets one answer,
and neither the reads nor the hashing (a hasher that releases the GIL, as xxhash
does for large buffers) hold it.
"""

from __future__ import annotations

import errno
import os
import threading
import weakref
from typing import TYPE_CHECKING, Protocol

from reservoir.agent.buffers import aligned_buffer

if TYPE_CHECKING:
    from ._base import Handle

CHUNK = 1 << 20  # bytes read (and hashed) at once through the page cache
DIRECT_CHUNK = 4 << 20  # ... with O_DIRECT (from the device: larger reads, fewer waits)
WORKERS = 8  # ranges read back at once: about as many as a copy verifies at once


class Hasher(Protocol):
    def update(self, data: memoryview, /) -> None: ...


_local = threading.local()
_held = [0]  # bytes of the worker threads' buffers alive, for the agent's metrics
_held_lock = threading.Lock()


def buffer_bytes() -> int:
    """Bytes of read-back buffers the worker threads of this process hold."""
    return _held[0]


def _count(size: int) -> None:
    with _held_lock:
        _held[0] += size


def _chunk_buffer() -> memoryview:
    """This worker thread's buffer."""
    buf: memoryview | None = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = aligned_buffer(max(CHUNK, DIRECT_CHUNK))
        _count(len(buf))
        weakref.finalize(buf.obj, _count, -len(buf))  # gone with its thread
    return buf


class _Reader:
    """Reads of one range: direct while that works, buffered from then on."""

    def __init__(self, h: Handle) -> None:
        self.h = h
        self.fd, self.mask = (h.dfd, h.dmask) if h.dfd >= 0 else (h.fd, 0)

    def start(self, offset: int) -> int:
        """Where reading for ``offset`` starts (aligned down for O_DIRECT)."""
        return offset & ~self.mask

    def read(self, buf: memoryview, pos: int) -> int:
        """Bytes read into ``buf`` at ``pos`` (fewer only at the end of the volume)."""
        if pos & self.mask:
            self._buffered()  # after an unaligned short direct read
        try:
            return os.preadv(self.fd, [buf], pos)
        except OSError as exc:
            if exc.errno != errno.EINVAL or not self.mask:
                raise
        self._buffered()
        return os.preadv(self.fd, [buf], pos)

    def _buffered(self) -> None:
        self.fd, self.mask = self.h.fd, 0


def hash_range(h: Handle, offset: int, length: int, hasher: Hasher) -> None:
    """Feeds [offset, offset + length) of the volume to ``hasher`` in order."""
    buf = _chunk_buffer()
    reader = _Reader(h)
    end = offset + length
    pos = reader.start(offset)
    while pos < end:
        chunk = DIRECT_CHUNK if reader.mask else CHUNK
        want = min(chunk, -(-end // (reader.mask + 1)) * (reader.mask + 1) - pos)
        got = reader.read(buf[:want], pos)
        if got <= offset - pos or got == 0:
            raise OSError(errno.EIO, "unexpected end of file")
        hasher.update(buf[max(offset - pos, 0) : min(got, end - pos)])
        pos += got
