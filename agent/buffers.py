"""Buffers for reuse, so a large read or write does not cost an allocation: a fresh
megabyte is zeroed page by page by the kernel (a quarter of the target's CPU when every
write took a new one)."""

from __future__ import annotations

__all__ = ["POOL_BYTES", "BufferPool"]

POOL_BYTES = 64 << 20  # the default bound of the buffers a BufferPool keeps for reuse


class BufferPool:
    """Buffers by size for reuse.  ``give`` is for a buffer nobody holds any more (its
    write done, its data hashed); a buffer never given back is simply collected.  Holds
    at most ``limit`` bytes."""

    def __init__(self, limit: int = POOL_BYTES) -> None:
        self.limit = limit
        self._free: dict[int, list[bytearray]] = {}
        self._held = 0

    @property
    def held(self) -> int:
        """Bytes kept for reuse."""
        return self._held

    def take(self, size: int) -> bytearray:
        """A buffer of exactly ``size`` bytes; a reused one holds an earlier write's data."""
        free = self._free.get(size)
        if free:
            self._held -= size
            return free.pop()
        return bytearray(size)

    def give(self, buf: bytearray) -> None:
        size = len(buf)
        if self._held + size <= self.limit:
            self._free.setdefault(size, []).append(buf)
            self._held += size
