"""The writing of one extent, piece by piece, shared by the streams of its pair.

A stream issues its extent's pieces only as fast as its window lets it (see
_window), so at the tail of a copy some pieces of the extents still being carried
are not on any connection yet. A stream of the same pair with nothing left to take
helps, as soon as its own pieces are all issued (not once its last extent is done:
on a 200 ms path that left half the streams idle for the last 0.75 s while the
others issued their last pieces alone): it writes such pieces over its own
connection, so the copy ends when the last bytes are on the wire instead of when
the slowest stream drained its backlog.

An :class:`ExtentWrite` knows which pieces are pending (nobody issued them), how
many are outstanding (issued, not completed), and the first error of its owner. A
helper that loses its connection gives its piece back; the owner issues it again.
The extent's buffer stays the owner's: it is reused only once no piece of it is
outstanding, on whichever connection.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from reservoir.agent.iscsi.pdu import FileSpan
from reservoir.agent.transfer._plan import Extent


@dataclass(eq=False)
class ExtentWrite:
    extent: Extent
    owner: int  # the stream carrying the extent
    data: memoryview | FileSpan
    piece: int
    pending: deque[int] = field(default_factory=deque)  # offsets nobody issued yet
    outstanding: int = 0  # pieces issued, not completed
    abandoned: bool = False
    error: BaseException | None = None  # the first failure of one of the owner's pieces
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.pending.extend(range(self.extent.offset, self.extent.end, self.piece))

    @property
    def complete(self) -> bool:
        return not self.pending and not self.outstanding

    def take_piece(self) -> int | None:
        """The offset of the next piece to issue, counted outstanding; None if none."""
        if self.abandoned or not self.pending:
            return None
        self.outstanding += 1
        return self.pending.popleft()

    def piece_view(self, offset: int) -> memoryview | FileSpan:
        start = offset - self.extent.offset
        return self.data[start : start + min(self.piece, self.extent.end - offset)]

    def piece_done(self) -> None:
        self.outstanding -= 1
        self._changed.set()

    def piece_back(self, offset: int) -> None:
        """An issued piece that did not complete (its connection was lost): pending
        again, first in line."""
        self.outstanding -= 1
        if not self.abandoned:
            self.pending.appendleft(offset)
        self._changed.set()

    def fail(self, error: BaseException) -> None:
        """One of the owner's pieces failed: the owner raises ``error``."""
        self.outstanding -= 1
        if self.error is None:
            self.error = error
        self._changed.set()

    def abandon(self) -> None:
        """The owner gave up on the extent (it goes back to the queue): nobody takes
        its pieces any more."""
        self.abandoned = True
        self.pending.clear()
        self._changed.set()

    async def changed(self) -> None:
        """Returns once a piece completed or came back since the last call."""
        await self._changed.wait()
        self._changed.clear()
