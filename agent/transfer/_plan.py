"""The transfer plan: a byte range cut into extents, dealt to streams (design 3.1).

Level 1: with several destination servers (a volume set), the source range is
striped over them RAID-0 style in stripe units dealt round-robin
(:mod:`reservoir.common.striping`), so every server pair carries an equal share.
Extents never cross a stripe unit.  Level 2 deals a pair's extents round-robin to
that pair's streams.
:class:`Queues` hands them out, with work stealing at the tail inside a pair: a
stream whose queue is empty takes from the back of the longest other queue of its
pair, so no stream idles while another has a backlog.  The plan is deterministic:
the same inputs give the same extents and queues.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from reservoir.agent.transfer._errors import CopyError
from reservoir.common.striping import locate, unit_end

DEFAULT_EXTENT_SIZE = 8 << 20
# An extent is a stream's unit of work, hash, verification and checkpoint: below this
# each costs more than it carries (1 KiB extents: a 256 MiB copy of 262144 extents
# ran at 10 MB/s on a core, against 500 MB/s)
MIN_EXTENT_SIZE = 64 << 10


class PlanError(CopyError):
    """A range, extent size, stripe unit or stream count that cannot be planned."""


@dataclass(frozen=True, slots=True)
class Extent:
    """Extent ``id``: bytes ``[offset, offset + length)`` of the source, written at
    ``dest_offset`` of destination ``pair`` (the same offset with one destination)."""

    id: int
    offset: int
    length: int
    pair: int = 0
    dest_offset: int = -1  # -1: the source offset

    def __post_init__(self) -> None:
        if self.dest_offset < 0:
            object.__setattr__(self, "dest_offset", self.offset)

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True, slots=True)
class ServerPair:
    """One source server and one destination server with their streams (level 1)."""

    source: str
    dest: str
    streams: int


@dataclass(frozen=True, slots=True)
class Plan:
    offset: int
    length: int
    extent_size: int
    block_size: int
    pairs: tuple[ServerPair, ...]
    extents: tuple[Extent, ...]
    stripe_unit: int = 0  # 0: one destination, no level-1 stripe

    @property
    def streams(self) -> int:
        return sum(pair.streams for pair in self.pairs)

    def extent(self, extent_id: int) -> Extent:
        return self.extents[extent_id]

    def first_stream(self, pair: int) -> int:
        return sum(p.streams for p in self.pairs[:pair])

    def streams_of(self, pair: int) -> range:
        first = self.first_stream(pair)
        return range(first, first + self.pairs[pair].streams)

    def pair_of(self, stream: int) -> int:
        """The server pair a (global) stream index belongs to."""
        for index, pair in enumerate(self.pairs):
            if stream < pair.streams:
                return index
            stream -= pair.streams
        raise IndexError("no such stream")

    def assignment(self) -> list[list[int]]:
        """Extent ids per stream, round-robin over the streams of each extent's pair
        (level 2 of the stripe)."""
        lanes: list[list[int]] = [[] for _ in range(self.streams)]
        dealt = [0] * len(self.pairs)
        for extent in self.extents:
            pair = self.pairs[extent.pair]
            lane = self.first_stream(extent.pair) + dealt[extent.pair] % pair.streams
            lanes[lane].append(extent.id)
            dealt[extent.pair] += 1
        return lanes

    def dest_end(self, pair: int) -> int:
        """The end of what the plan writes on destination ``pair``."""
        ends = [e.dest_offset + e.length for e in self.extents if e.pair == pair]
        return max(ends, default=0)


def make_plan(
    offset: int,
    length: int,
    *,
    extent_size: int,
    block_size: int,
    pair: ServerPair | None = None,
    pairs: tuple[ServerPair, ...] = (),
    stripe_unit: int = 0,
) -> Plan:
    """Cuts ``[offset, offset + length)`` into extents of ``extent_size`` (rounded
    up to the block size); the last one may be shorter.  With several ``pairs`` the
    range is striped over their destinations in units of ``stripe_unit`` bytes (a
    multiple of the block size) and extents end at stripe-unit boundaries.  Raises
    :class:`PlanError`."""
    pairs = (pair,) if pair is not None else pairs
    if block_size <= 0 or offset % block_size or length % block_size:
        raise PlanError(f"range {offset}:{length} is not aligned to {block_size}-byte blocks")
    if length <= 0 or extent_size <= 0 or not pairs or any(p.streams <= 0 for p in pairs):
        raise PlanError("the range, the extent size and the streams must be positive")
    size = -(-extent_size // block_size) * block_size
    if len(pairs) == 1:
        extents = tuple(
            Extent(i, start, min(size, offset + length - start))
            for i, start in enumerate(range(offset, offset + length, size))
        )
        return Plan(offset, length, size, block_size, pairs, extents)
    if stripe_unit <= 0 or stripe_unit % block_size:
        raise PlanError(f"the stripe unit must be a positive multiple of {block_size} bytes")
    extents = tuple(_striped(offset, length, min(size, stripe_unit), stripe_unit, len(pairs)))
    return Plan(offset, length, size, block_size, pairs, extents, stripe_unit)


def _striped(offset: int, length: int, size: int, unit: int, members: int) -> list[Extent]:
    """Extents of at most ``size`` bytes inside stripe units dealt over ``members``."""
    extents: list[Extent] = []
    pos, end = offset, offset + length
    while pos < end:
        piece = min(size, unit_end(pos, unit) - pos, end - pos)
        member, where = locate(pos, unit, members)
        extents.append(Extent(len(extents), pos, piece, member, where))
        pos += piece
    return extents


class Queues:
    """Per-stream queues of a plan with work stealing and a requeue lane."""

    def __init__(self, plan: Plan, skip: Iterable[int] = ()) -> None:
        done = set(skip)
        self.plan = plan
        self.lanes = [deque(i for i in lane if i not in done) for lane in plan.assignment()]
        self.retry: deque[int] = deque()
        self.steals = 0

    def __len__(self) -> int:
        return len(self.retry) + sum(len(lane) for lane in self.lanes)

    def take(self, stream: int) -> Extent | None:
        """The next extent for ``stream``: requeued ones of its pair first, then its
        own queue, then the back of the longest other queue of its pair; None when
        nothing is left for the pair."""
        pair = self.plan.pair_of(stream)
        for extent_id in self.retry:
            if self.plan.extent(extent_id).pair == pair:
                self.retry.remove(extent_id)
                return self.plan.extent(extent_id)
        if self.lanes[stream]:
            return self.plan.extent(self.lanes[stream].popleft())
        mine = self.plan.streams_of(pair)
        victim = max(mine, key=lambda i: (len(self.lanes[i]), -i))
        if not self.lanes[victim]:
            return None
        self.steals += 1
        return self.plan.extent(self.lanes[victim].pop())

    def queued(self, pair: int) -> int:
        """How many extents are still queued for ``pair``."""
        retry = sum(self.plan.extent(i).pair == pair for i in self.retry)
        return retry + sum(len(self.lanes[s]) for s in self.plan.streams_of(pair))

    def requeue(self, extents: Iterable[Extent]) -> None:
        """Extents a failed stream held go back, ahead of everything else."""
        self.retry.extend(sorted(e.id for e in extents))
