"""Receipts: the digest of what a WRITE received, kept while nothing overwrites it.

A copy in ``receipt`` verification mode asks the target (HASH RANGE, algorithm 02h)
whether the WRITE commands that last wrote a range received what the copy sent,
instead of having the target read its storage back. A receipt is the XXH3-128 of a
WRITE's data, recorded once the write completed without error. It says what the
target received and stored without an error from the storage, not what the storage
holds now: that is the ``storage`` mode. A receipt-mode copy asks for an extent's
receipts as it writes it and again in its final whole-range check, where a receipt
still kept says no change went over the extent since. It is hashed from the buffer
the data was received into, which the write leaves as it was.

A receipt is dropped by any later write, WRITE SAME, UNMAP or other change that
overlaps it, and is never recorded when an overlapping change began while its write
was in flight (the order in which the two reach the storage is unknown). Only writes
of ``RECEIPT_MIN_BYTES`` to ``RECEIPT_MAX_BYTES`` get one (a copy writes 1 MiB
pieces; small random writes pay nothing but the bookkeeping of dropping). At most
``RECEIPT_LIMIT`` receipts are kept per logical unit, the oldest dropped first: a copy
asks for them seconds after writing, and again at its end (16 GiB of 1 MiB writes: a
longer copy's first extents are checked from storage there).

Hashing what a write received costs the target about a tenth of its CPU during a
copy, so receipts are recorded only while someone uses them: for ``RECEIPT_ARMED_S``
after the last HASH RANGE algorithm 02h question on the logical unit (a copy in
``receipt`` mode asks one over no blocks before its first write). Writes outside that
window get no receipt; what they overlap is dropped all the same.

Read-backs: the same bookkeeping keeps the digest each HASH RANGE algorithm 01h read
back from storage, over exactly the range it read, while no change goes over it
(algorithm 03h answers with it). A ``storage``-mode copy reads every extent back once,
after writing it, and its final whole-range check asks for those digests instead of
reading the whole range a second time. A read-back during which an overlapping change
was in flight records nothing (what it read may be part old, part new). Keeping
them costs nothing: the digest was computed to answer 01h.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import xxhash

RECEIPT_MIN_BYTES: Final = 64 << 10
RECEIPT_MAX_BYTES: Final = 4 << 20
RECEIPT_LIMIT: Final = 16384
RECEIPT_ARMED_S: Final = 300.0
READ_BACK_MAX_BYTES: Final = 64 << 20
"""The longest range HASH RANGE hashes, so the longest read-back kept."""
_BUCKET_BYTES: Final = 1 << 20


@dataclass(eq=False, slots=True)
class _Receipt:
    lba: int
    blocks: int
    digest: bytes
    live: bool = True


@dataclass(eq=False, slots=True)
class _Change:
    lba: int
    end: int
    reading: bool = False  # a read-back: changes nothing, spoils no other change
    spoiled: bool = False


class _Kept:
    """Digests of block ranges by their first block, the oldest dropped first beyond
    ``limit``; found by overlap through 1 MiB buckets of their starts."""

    def __init__(self, block_size: int, limit: int, max_bytes: int) -> None:
        self.limit = limit
        self._bucket = max(1, _BUCKET_BYTES // block_size)  # blocks a bucket
        self._span = max(1, max_bytes // block_size)  # longest range, blocks
        self._by_start: dict[int, _Receipt] = {}
        self._buckets: dict[int, set[int]] = {}  # bucket -> starts of ranges in it
        self._order: deque[_Receipt] = deque()

    def __len__(self) -> int:
        return len(self._by_start)

    def get(self, lba: int) -> _Receipt | None:
        return self._by_start.get(lba)

    def add(self, receipt: _Receipt) -> None:
        if (old := self._by_start.get(receipt.lba)) is not None:
            self._remove(old)
        self._by_start[receipt.lba] = receipt
        self._buckets.setdefault(receipt.lba // self._bucket, set()).add(receipt.lba)
        self._order.append(receipt)
        while len(self._by_start) > self.limit:
            oldest = self._order.popleft()
            if oldest.live:
                self._remove(oldest)
        while self._order and not self._order[0].live:
            self._order.popleft()
        if len(self._order) > 2 * self.limit:  # dropped ones behind a live one
            self._order = deque(r for r in self._order if r.live)

    def drop_overlapping(self, lba: int, end: int) -> None:
        if not self._by_start:  # most writes: nobody asked for receipts or read-backs
            return
        first = max(0, lba - self._span + 1) // self._bucket
        for bucket in range(first, (end - 1) // self._bucket + 1):
            for start in list(self._buckets.get(bucket, ())):
                receipt = self._by_start[start]
                if start < end and lba < start + receipt.blocks:
                    self._remove(receipt)

    def _remove(self, receipt: _Receipt) -> None:
        receipt.live = False
        del self._by_start[receipt.lba]
        bucket = receipt.lba // self._bucket
        starts = self._buckets[bucket]
        starts.discard(receipt.lba)
        if not starts:
            del self._buckets[bucket]


class Receipts:
    """The receipts and read-backs of one logical unit (see the module)."""

    def __init__(
        self,
        block_size: int,
        limit: int = RECEIPT_LIMIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.block_size = block_size
        self._clock = clock
        self._armed_until = float("-inf")
        self._written = _Kept(block_size, limit, RECEIPT_MAX_BYTES)
        self._read = _Kept(block_size, limit, READ_BACK_MAX_BYTES)
        self._changing: set[_Change] = set()

    def __len__(self) -> int:
        """Receipts kept (read-backs not counted)."""
        return len(self._written)

    def arm(self) -> None:
        """Someone asked about receipts: record them for ``RECEIPT_ARMED_S`` from now."""
        self._armed_until = self._clock() + RECEIPT_ARMED_S

    def wants(self, nbytes: int) -> bool:
        """Whether a write of ``nbytes`` gets a receipt (now)."""
        if not RECEIPT_MIN_BYTES <= nbytes <= RECEIPT_MAX_BYTES:
            return False
        return self._clock() < self._armed_until

    def begin(self, lba: int, blocks: int) -> _Change:
        """A change of ``blocks`` blocks at ``lba`` starts: the receipts and read-backs
        it overlaps are dropped, and changes and read-backs in flight that it overlaps
        record none."""
        change = _Change(lba, lba + blocks)
        for other in self._overlapping(change):
            other.spoiled = True
            change.spoiled = change.spoiled or not other.reading
        self._changing.add(change)
        self._written.drop_overlapping(lba, lba + blocks)
        self._read.drop_overlapping(lba, lba + blocks)
        return change

    def end(self, change: _Change, data: bytes | bytearray | memoryview | None = None) -> None:
        """The change is over; ``data`` (what a successful write received) becomes its
        receipt unless another change overlapped it meanwhile."""
        self._changing.discard(change)
        if data is None or change.spoiled:
            return
        # unspoiled: no overlapping change began while it was in flight, so no receipt
        # overlapping it was recorded since begin() dropped them
        receipt = _Receipt(change.lba, change.end - change.lba, xxhash.xxh3_128_digest(data))
        self._written.add(receipt)

    def begin_read(self, lba: int, blocks: int) -> _Change:
        """A read-back of ``blocks`` blocks at ``lba`` starts (it records nothing if a
        change over the range is in flight now or begins before it ends)."""
        change = _Change(lba, lba + blocks, reading=True)
        change.spoiled = any(not other.reading for other in self._overlapping(change))
        self._changing.add(change)
        return change

    def end_read(self, change: _Change, digest: bytes | None) -> None:
        """The read-back is over: ``digest`` (of what it read, None if it failed) is
        kept for its range unless a change overlapped it meanwhile."""
        self._changing.discard(change)
        if digest is not None and not change.spoiled:
            self._read.add(_Receipt(change.lba, change.end - change.lba, digest))

    def digest_of(self, lba: int, blocks: int) -> bytes | None:
        """XXH3-128 over the receipts' digests that tile the range in order; None when
        any block of it has no receipt, or a receipt crosses its ends."""
        digests: list[bytes] = []
        at, end = lba, lba + blocks
        while at < end:
            receipt = self._written.get(at)
            if receipt is None or at + receipt.blocks > end:
                return None
            digests.append(receipt.digest)
            at += receipt.blocks
        return xxhash.xxh3_128_digest(b"".join(digests))

    def read_back(self, lba: int, blocks: int) -> bytes | None:
        """The digest a read-back of exactly this range gave, if no change went over
        any of it since; else None."""
        kept = self._read.get(lba)
        return kept.digest if kept is not None and kept.blocks == blocks else None

    def _overlapping(self, change: _Change) -> list[_Change]:
        return [c for c in self._changing if c.lba < change.end and change.lba < c.end]


def receipt_digest(data: bytes | bytearray | memoryview, piece: int) -> bytes:
    """What a copy expects for ``data`` written in ``piece``-byte commands: XXH3-128
    over the XXH3-128 of each piece, in order."""
    view = memoryview(data)
    parts = [xxhash.xxh3_128_digest(view[i : i + piece]) for i in range(0, len(view), piece)]
    return xxhash.xxh3_128_digest(b"".join(parts))
