"""Buffers for reuse, so a large read or write does not cost an allocation: a fresh
megabyte is zeroed page by page by the kernel (a quarter of the target's CPU when every
write took a new one).

A buffer is a memoryview of an anonymous mapping: page aligned, so O_DIRECT and the
io_uring engine can use it as it is (no bounce copy).  The pool knows which buffers it
lent: giving back one it did not lend, or one twice, does nothing, so an error path may
give back whatever it holds without asking whether another path did already.
"""

from __future__ import annotations

import mmap
import weakref

__all__ = ["POOL_BYTES", "BufferPool", "aligned_buffer"]

POOL_BYTES = 64 << 20  # the default bound of the buffers a BufferPool keeps for reuse


def aligned_buffer(size: int) -> memoryview:
    """A fresh page-aligned buffer of ``size`` bytes (zeros)."""
    if size <= 0:
        return memoryview(bytearray(0))
    return memoryview(mmap.mmap(-1, size))


class BufferPool:
    """Page-aligned buffers by size for reuse.  ``give`` is for a buffer nobody holds any
    more (its write done, its data hashed); a buffer never given back is simply
    collected.  Keeps at most ``limit`` bytes; :meth:`set_limit` moves the bound."""

    def __init__(self, limit: int = POOL_BYTES) -> None:
        self.limit = limit
        self._free: dict[int, list[memoryview]] = {}
        self._held = 0
        self._lent: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()
        self.misses = 0  # buffers allocated because none of their size was kept

    @property
    def held(self) -> int:
        """Bytes kept for reuse."""
        return self._held

    @property
    def lent(self) -> int:
        """Bytes lent by :meth:`take`, not given back and still alive."""
        return sum(len(m) for m in self._lent)

    def take(self, size: int) -> memoryview:
        """A buffer of exactly ``size`` bytes; a reused one holds an earlier write's data."""
        free = self._free.get(size)
        if free:
            self._held -= size
            buf = free.pop()
        else:
            self.misses += 1
            buf = aligned_buffer(size)
        if isinstance(buf.obj, mmap.mmap):
            self._lent.add(buf.obj)
        return buf

    def give(self, buf: object) -> None:
        """Keep ``buf`` for reuse if this pool lent it (whole) and the bound allows."""
        if not isinstance(buf, memoryview) or not isinstance(buf.obj, mmap.mmap):
            return
        owner = buf.obj
        if owner not in self._lent or buf.nbytes != len(owner):
            return  # not ours, a part of one, or given back already
        self._lent.discard(owner)
        size = buf.nbytes
        if self._held + size <= self.limit:
            self._free.setdefault(size, []).append(buf)
            self._held += size

    def set_limit(self, limit: int) -> None:
        """A new bound; buffers kept beyond it are let go."""
        self.limit = limit
        for free in self._free.values():
            while free and self._held > limit:
                self._held -= len(free.pop())
