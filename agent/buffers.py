"""Buffers for reuse, so a large read or write does not cost an allocation: a fresh
megabyte is zeroed page by page by the kernel (a quarter of the target's CPU when every
write took a new one).

A buffer is a memoryview of an anonymous mapping: page aligned, so O_DIRECT and the
io_uring engine can use it as it is (no bounce copy).  The pool knows which buffers it
lent: giving back one it did not lend, or one twice, does nothing, so an error path may
give back whatever it holds without asking whether another path did already.

A pool may also lend chunks of an arena (:meth:`BufferPool.use_arena`): memory the
storage engine has registered with io_uring, which it writes from without copying
into its own buffers. Write data received into a chunk goes from the socket to the
page cache with no copy in this process. A chunk is known by its address, so a view
of it given back (``memoryview(buf)`` of the lent one) frees it; one never given back
stays lent, and the pool lends plain buffers once every chunk is out.
"""

from __future__ import annotations

import ctypes
import mmap
import weakref

__all__ = ["POOL_BYTES", "BufferPool", "aligned_buffer"]

POOL_BYTES = 64 << 20  # the default bound of the buffers a BufferPool keeps for reuse
ARENA_MIN = 64 << 10  # smaller buffers are not worth a chunk of the arena


def _address(view: memoryview) -> int:
    """The address of a writable buffer's first byte."""
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


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
        self._arena = memoryview(b"")
        self._arena_at = self._chunk = 0
        self._chunks_free: list[int] = []
        self._chunks_lent: dict[int, int] = {}  # chunk -> bytes lent from it

    def use_arena(self, arena: memoryview, chunk: int) -> None:
        """Lend buffers of ``ARENA_MIN`` to ``chunk`` bytes from ``arena``, a chunk each
        (``chunk`` a multiple of the page size: each chunk is page aligned)."""
        if chunk <= 0 or chunk % mmap.PAGESIZE:
            raise ValueError(f"chunk must be a positive multiple of {mmap.PAGESIZE}")
        self._arena, self._chunk = arena, chunk
        self._arena_at = _address(arena) if len(arena) else 0
        self._chunks_free = list(range(len(arena) // chunk - 1, -1, -1))
        self._chunks_lent.clear()

    @property
    def arena_bytes(self) -> int:
        """The size of the arena it lends chunks of (0: none)."""
        return len(self._arena)

    @property
    def arena_lent(self) -> int:
        """Bytes of the arena lent and not given back."""
        return sum(self._chunks_lent.values())

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
        if ARENA_MIN <= size <= self._chunk and self._chunks_free:
            index = self._chunks_free.pop()
            self._chunks_lent[index] = size
            return self._arena[index * self._chunk : index * self._chunk + size]
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
        if not isinstance(buf, memoryview):
            return
        if self._chunks_lent and buf.obj is self._arena.obj and not buf.readonly:
            self._give_chunk(buf)
            return
        if not isinstance(buf.obj, mmap.mmap):
            return
        owner = buf.obj
        if owner not in self._lent or buf.nbytes != len(owner):
            return  # not ours, a part of one, or given back already
        self._lent.discard(owner)
        size = buf.nbytes
        if self._held + size <= self.limit:
            self._free.setdefault(size, []).append(buf)
            self._held += size

    def _give_chunk(self, buf: memoryview) -> None:
        offset = _address(buf) - self._arena_at if buf.nbytes else -1
        index, rest = divmod(offset, self._chunk)
        if rest == 0 and self._chunks_lent.get(index) == buf.nbytes:
            del self._chunks_lent[index]
            self._chunks_free.append(index)

    def set_limit(self, limit: int) -> None:
        """A new bound; buffers kept beyond it are let go."""
        self.limit = limit
        for free in self._free.values():
            while free and self._held > limit:
                self._held -= len(free.pop())
