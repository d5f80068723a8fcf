"""Where a source changed since its extents were copied.

A copy whose source's change mark moved (:mod:`reservoir.agent.storage._changes`)
cannot say "equal to the source" on the mark's word, and a resume cannot skip the
extents an earlier run did on the checkpoint's. A mark says *whether* the source was
written, not *where*. The source can say where, at the cost of hashing it again, which
is cheap next to the network the copy crossed: every extent done is hashed again as
the source is now and compared with the digest taken when it was read (the
checkpoint's). A local source is read again (:func:`local_rehasher`); a remote one on
our target hashes its own extents (HASH RANGE), and no data crosses the network.

:func:`find_changes` does that, and takes the source's mark before and after, so its
answer holds only for a source that nothing wrote meanwhile (None where something
did: the source is still being written). The copy uses it twice:

- at its end, where the mark moved: if no extent differs, the destination equals the
  source as it now is, and the copy is verified (a touch, or a write of the same
  bytes); if some do, it fails naming them, and its checkpoint forgets just those;
- at a resume whose source moved since the checkpoint was saved: the extents that
  still match are skipped, the ones that differ are sent (neither is looked for on
  the destination).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import xxhash

from reservoir.agent.storage import ChangeMark, Volume
from reservoir.agent.transfer._checkpoint import Checkpoint
from reservoir.agent.transfer._plan import Extent, Plan

log = logging.getLogger("reservoir.copy")

LOCAL_AT_ONCE = 4  # extents hashed at once (each in a worker thread of the storage engine)
PROGRESS_S = 5.0  # how often a long pass says how far it is
SHOWN_RANGES = 4  # byte ranges a message names; the rest are counted


@dataclass(frozen=True, slots=True)
class Rehasher:
    """How a source is hashed again: its ``label``, its change mark now (None: none
    could be read), the digest of a byte range as it is now (None: it cannot hash that
    range), and how many ranges to hash at once."""

    label: str
    mark: Callable[[], Awaitable[ChangeMark | None]]
    digest: Callable[[int, int], Awaitable[bytes | None]]
    at_once: int


def local_rehasher(volume: Volume) -> Rehasher:
    """A local volume read again, each range in a worker thread."""

    async def mark() -> ChangeMark:
        return volume.change_mark()

    async def digest(offset: int, length: int) -> bytes:
        hasher = xxhash.xxh3_128()
        await volume.hash_range(offset, length, hasher)
        return hasher.digest()

    return Rehasher(str(volume.path), mark, digest, LOCAL_AT_ONCE)


@dataclass(frozen=True, slots=True)
class SourceChanges:
    """The extents that differ from what was sent (in id order), of ``checked``
    hashed again, while the source's mark stayed ``mark``."""

    changed: tuple[Extent, ...]
    checked: int
    mark: ChangeMark

    @property
    def ids(self) -> set[int]:
        return {e.id for e in self.changed}

    @property
    def bytes(self) -> int:
        return sum(e.length for e in self.changed)

    def describe(self) -> str:
        """``2 of 16 extents differ from what was sent (bytes 0-4194303 and ...)``."""
        count = f"{len(self.changed)} of {self.checked} extents"
        if not self.changed:
            return f"{count} differ from what was sent"
        ranges = [f"{a}-{b - 1}" for a, b in merged_ranges(self.changed)]
        shown = ", ".join(ranges[:SHOWN_RANGES])
        if len(ranges) > SHOWN_RANGES:
            shown += f" and {len(ranges) - SHOWN_RANGES} more ranges"
        return f"{count} differ from what was sent (source bytes {shown})"


def merged_ranges(extents: Sequence[Extent]) -> list[tuple[int, int]]:
    """The extents' source byte ranges ``(start, end)``, adjacent ones joined."""
    ranges: list[tuple[int, int]] = []
    for e in sorted(extents, key=lambda e: e.offset):
        if ranges and ranges[-1][1] == e.offset:
            ranges[-1] = (ranges[-1][0], e.end)
        else:
            ranges.append((e.offset, e.end))
    return ranges


async def find_changes(
    source: Rehasher, plan: Plan, done: Mapping[int, bytes], before: ChangeMark | None = None
) -> SourceChanges | None:
    """Hashes every extent of ``done`` (extent id -> digest when it was read) as the
    source is now; None where its mark moved meanwhile, or it cannot tell. ``before``
    is the mark the caller has just read, if it has (not read again: a round trip on a
    remote source)."""
    before = before or await source.mark()
    if before is None:
        return None
    ids = sorted(i for i in done if i < len(plan.extents))
    pending = iter(ids)
    changed: list[Extent] = []
    refused: list[Extent] = []  # an extent the source would not hash: it cannot tell
    pace = _Pace(len(ids), source.label)

    async def worker() -> None:
        for extent_id in pending:
            extent = plan.extent(extent_id)
            now = None if refused else await source.digest(extent.offset, extent.length)
            if now is None:
                refused.append(extent)
                return
            if now != done[extent_id]:
                changed.append(extent)
            pace.one_more()

    await asyncio.gather(*(worker() for _ in range(min(source.at_once, len(ids)) or 1)))
    if refused:
        log.warning("%s cannot hash %d bytes at once", source.label, refused[0].length)
        return None
    after = await source.mark()
    if after is None or before.moved(after):
        return None
    return SourceChanges(tuple(sorted(changed, key=lambda e: e.id)), len(ids), before)


async def recheck_moved_source(
    source: Rehasher, plan: Plan, checkpoint: Checkpoint
) -> SourceChanges | None:
    """A resume whose source moved since its checkpoint was saved: the done extents
    that differ from the source now are dropped from the checkpoint, which then keeps
    the source's mark as it was while they were hashed. None where the source did not
    move, or moved while it was hashed, or cannot tell (the copy then takes none of
    the done extents on the checkpoint's word: see :meth:`Checkpoint.watch_source`)."""
    earlier = checkpoint.source_mark
    if earlier is None or not checkpoint.done:
        return None
    now = await source.mark()
    if now is None or not earlier.moved(now):
        return None
    log.warning(
        "%s changed since the checkpoint was saved (%s moved): hashing its %d done extents again",
        source.label,
        earlier.how,
        len(checkpoint.done),
    )
    changes = await find_changes(source, plan, checkpoint.done, now)
    if changes is None:
        log.warning("%s could not be hashed again unchanged", source.label)
        return None
    checkpoint.forget(changes.ids, changes.mark)
    log.warning("%s: %s; those are sent again", source.label, changes.describe())
    return changes


class _Pace:
    """Logs how far a long pass is, every :data:`PROGRESS_S` seconds."""

    def __init__(self, total: int, label: str) -> None:
        self.total, self.label, self.count = total, label, 0
        self.next = time.monotonic() + PROGRESS_S

    def one_more(self) -> None:
        self.count += 1
        if time.monotonic() >= self.next:
            self.next += PROGRESS_S
            log.info("%s: %d of %d extents hashed again", self.label, self.count, self.total)
