"""The copy's last word: when the last extent is done, every extent of the whole range
is hashed again on its destination (HASH RANGE where the target has it, read back
elsewhere) and compared with the digest of what was read from the source; the root
hashes of both are then equal. Extents that differ are sent again once and checked
again; if any still differs, the copy fails and names their byte ranges.

In ``receipt`` mode an extent this run wrote is checked again by the destination's
receipts (HASH RANGE 02h) instead of its storage: a receipt is the digest of what a
write received and stored without error, and the target drops it at any later change
over it (a write of another session, WRITE SAME, UNMAP), so one still there says the
extent holds what was written. Where the receipts no longer cover an extent, its
storage is hashed. In ``storage`` mode an extent this run wrote, and the destination
hashed from its storage as it was written, is checked by the digest the destination
kept of that read (HASH RANGE 03h) where no change through it has gone over the
extent since; elsewhere its storage is hashed (or read back) now. Extents done by an
earlier run are always hashed from storage: between two runs anything may have
changed them, the target's own writes or not (a process writing its backing file).

This is what "verified" means in a summary: a statement about the destination at the
end, including extents a checkpoint said were done by an earlier run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Mapping, Sequence

from reservoir.agent.transfer._plan import Extent
from reservoir.agent.transfer._stream import StreamWorker, VerifyError

READ_BACK_AT_ONCE = 2  # extents a stream reads back at a time: two extent buffers
HASHED_AT_ONCE = 32
"""Extents a stream asks a hashing destination about at a time: an answer costs the
destination a read of its storage (its read-back threads bound those) or nothing (by
receipts), and this one stream no memory, so most copies' end checks ask everything
in one round trip (32 of the target's 128 commands in flight a session)."""


async def mismatched(
    workers: Mapping[int, Sequence[StreamWorker]],
    extents: Sequence[Extent],
    wanted: Mapping[int, bytes],
    receipts: Mapping[int, bytes],
    at_once: int = READ_BACK_AT_ONCE,
    *,
    done_here: Collection[int] = (),
) -> list[Extent]:
    """The extents whose destination digest is not the one wanted, in extent order;
    ``workers`` are the live streams of each server pair, each checking ``at_once``
    extents at a time (more where the destinations hash: nothing is read back). An
    extent with an entry in ``receipts`` (written by this run in receipt mode) is
    checked by the destination's receipts where they still cover it; one in
    ``done_here`` (written or found, and checked, by this run) by the digest the
    destination kept when it hashed the extent's storage, where no change has gone
    over it since."""
    bad: list[Extent] = []

    async def check(worker: StreamWorker, mine: list[Extent]) -> None:
        limit = asyncio.Semaphore(at_once)

        async def one(extent: Extent) -> None:
            async with limit:
                receipt, ours = receipts.get(extent.id), extent.id in done_here
                if not await worker.verify(extent, wanted[extent.id], receipt, done_here=ours):
                    bad.append(extent)

        await asyncio.gather(*(one(e) for e in mine))

    await asyncio.gather(*(check(w, mine) for w, mine in _deal(workers, extents)))
    return sorted(bad, key=lambda e: e.id)


async def resend(workers: Mapping[int, Sequence[StreamWorker]], extents: Sequence[Extent]) -> None:
    """Reads the extents from the source again and writes them (each verified as it is
    written, as every extent is; one that still fails is left to the check after)."""

    async def carry(worker: StreamWorker, mine: list[Extent]) -> None:
        for extent in mine:
            with contextlib.suppress(VerifyError):  # the check after names it
                await worker.resend(extent)

    await asyncio.gather(*(carry(w, mine) for w, mine in _deal(workers, extents)))


def _deal(
    workers: Mapping[int, Sequence[StreamWorker]], extents: Sequence[Extent]
) -> list[tuple[StreamWorker, list[Extent]]]:
    """The extents dealt round-robin over the streams of their pair."""
    dealt: dict[int, list[Extent]] = {}
    order: list[StreamWorker] = []
    counts: dict[int, int] = {}
    for extent in extents:
        pair = workers[extent.pair]
        worker = pair[counts.get(extent.pair, 0) % len(pair)]
        counts[extent.pair] = counts.get(extent.pair, 0) + 1
        if id(worker) not in dealt:
            dealt[id(worker)] = []
            order.append(worker)
        dealt[id(worker)].append(extent)
    return [(w, dealt[id(w)]) for w in order]


def ranges(extents: Sequence[Extent]) -> str:
    """``bytes A-B of destination P`` for each extent (at most 8, then a count)."""
    shown = [
        f"bytes {e.dest_offset}-{e.dest_offset + e.length - 1} of destination {e.pair}"
        for e in extents[:8]
    ]
    more = f" and {len(extents) - 8} more extents" if len(extents) > 8 else ""
    return ", ".join(shown) + more
