"""The transfer plan: a byte range cut into extents, dealt to streams (design 3.1).

Level 1 (server pairs) is carried by :class:`Plan` but only one pair exists today;
level 2 deals a pair's extents round-robin to its streams.  :class:`Queues` hands
them out, with work stealing at the tail: a stream whose queue is empty takes from
the back of the longest other queue, so no stream idles while another has a backlog.
The plan is deterministic: the same inputs give the same extents and queues.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_EXTENT_SIZE = 8 << 20


@dataclass(frozen=True, slots=True)
class Extent:
    """Extent ``id`` covers bytes ``[offset, offset + length)`` of both volumes."""

    id: int
    offset: int
    length: int

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

    @property
    def streams(self) -> int:
        return sum(pair.streams for pair in self.pairs)

    def extent(self, extent_id: int) -> Extent:
        return self.extents[extent_id]

    def assignment(self) -> list[list[int]]:
        """Extent ids per stream, round-robin (level 2 of the stripe)."""
        lanes: list[list[int]] = [[] for _ in range(self.streams)]
        for extent in self.extents:
            lanes[extent.id % self.streams].append(extent.id)
        return lanes


def make_plan(
    offset: int,
    length: int,
    *,
    extent_size: int,
    block_size: int,
    pair: ServerPair,
) -> Plan:
    """Cuts ``[offset, offset + length)`` into extents of ``extent_size`` (rounded
    up to the block size); the last one may be shorter.  Raises ValueError."""
    if block_size <= 0 or offset % block_size or length % block_size:
        raise ValueError(f"range {offset}:{length} is not aligned to {block_size}-byte blocks")
    if length <= 0 or extent_size <= 0 or pair.streams <= 0:
        raise ValueError("the range, the extent size and the streams must be positive")
    size = -(-extent_size // block_size) * block_size
    extents = tuple(
        Extent(i, start, min(size, offset + length - start))
        for i, start in enumerate(range(offset, offset + length, size))
    )
    return Plan(offset, length, size, block_size, (pair,), extents)


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
        """The next extent for ``stream``: requeued ones first, then its own queue,
        then the back of the longest other queue; None when nothing is left."""
        if self.retry:
            return self.plan.extent(self.retry.popleft())
        if self.lanes[stream]:
            return self.plan.extent(self.lanes[stream].popleft())
        victim = max(range(len(self.lanes)), key=lambda i: (len(self.lanes[i]), -i))
        if not self.lanes[victim]:
            return None
        self.steals += 1
        return self.plan.extent(self.lanes[victim].pop())

    def requeue(self, extents: Iterable[Extent]) -> None:
        """Extents a failed stream held go back, ahead of everything else."""
        self.retry.extend(sorted(e.id for e in extents))
