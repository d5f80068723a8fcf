"""What an engine's volumes asked of storage, counted for the agent's metrics.

Each :class:`~._base.Engine` has one :class:`IoCounts`; its volumes add to it when a
request completes (:mod:`._volume`): plain integer additions in the event loop's
thread, no lock. Reads answered at once from the page cache (preadv2 with
RWF_NOWAIT) count as reads too, and also in ``cached_reads``. A data segment the
kernel sends straight from a volume's file (sendfile) is not counted: it never
passes through the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["IoCounts"]


@dataclass(slots=True)
class IoCounts:
    """Requests completed and the bytes they moved, since the engine opened."""

    reads: int = 0
    cached_reads: int = 0  # of ``reads``: answered from the page cache, engine not used
    read_bytes: int = 0
    writes: int = 0
    written_bytes: int = 0
    direct_written_bytes: int = 0  # of ``written_bytes``: to the O_DIRECT descriptor
    flushes: int = 0
    discards: int = 0
    zeroings: int = 0  # write_zeroes requests (their zeros are not in written_bytes)

    def requests(self) -> dict[str, int]:
        """Requests by operation: ``read``, ``write``, ``flush``, ``discard``, ``zero``."""
        return {
            "read": self.reads,
            "write": self.writes,
            "flush": self.flushes,
            "discard": self.discards,
            "zero": self.zeroings,
        }
