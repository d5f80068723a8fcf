"""How many write commands a stream keeps on its connection: enough to keep the
socket's send queue filled, no more.

A write command is done a round trip after its data left, so a stream stays busy
while it has about two congestion windows of data issued (one in flight, one
queued behind it) plus a piece for the granularity. Issuing more only fills the
send buffer: at the tail of a copy the stream then drains that backlog alone while
the others idle, and its pieces could have been written by them (_extent_write).
The limit is read from the connection's TCP_INFO at most every ``REFRESH_S``: the
window (snd_cwnd x snd_mss), or what the connection's pacing rate carries in a round
trip where that is less (a stream whose rate is capped keeps a window far above what
it sends), kept between ``least`` and ``most`` pieces; a connection without
TCP_INFO (a test transport, a local file) gets ``most``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from reservoir.agent.telemetry.tcp_info import parse_tcp_info
from reservoir.agent.transfer._caps import NO_PACING

REFRESH_S = 0.05
LEAST_PIECES = 2

TcpInfoSource = Callable[[], bytes]


def pieces_for(cwnd_bytes: int, piece: int, least: int, most: int) -> int:
    """Pieces to keep issued for a congestion window of ``cwnd_bytes``."""
    wanted = math.ceil(2 * cwnd_bytes / piece) + 1
    return max(least, min(most, wanted))


class Window:
    """A semaphore whose size follows the connection (see the module)."""

    def __init__(
        self,
        most: int,
        piece: int,
        tcp_info: TcpInfoSource | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.most, self.piece = most, piece
        self.least = min(LEAST_PIECES, most)
        self.used = 0
        self._tcp_info = tcp_info
        self._clock = clock
        self._limit = most
        self._read_at = -math.inf
        self._freed = asyncio.Event()

    @property
    def limit(self) -> int:
        """The pieces the stream may have issued now."""
        if self._tcp_info is not None and self._clock() - self._read_at >= REFRESH_S:
            self._read_at = self._clock()
            self._limit = self._sized(self._tcp_info())
        return self._limit

    def _sized(self, raw: bytes) -> int:
        info = parse_tcp_info(raw) if raw else None
        if info is None or not info.snd_cwnd or not info.snd_mss:
            return self.most
        window = info.snd_cwnd * info.snd_mss
        if info.pacing_rate and info.rtt and info.pacing_rate < NO_PACING:
            # a paced connection (its rate capped, or BBR) sends its pacing rate, not
            # its window, in a round trip: what it carries then is all it needs issued
            window = min(window, info.pacing_rate * info.rtt // 1_000_000)
        return pieces_for(window, self.piece, self.least, self.most)

    async def acquire(self) -> None:
        while self.used >= self.limit:
            self._freed.clear()
            await self._freed.wait()
        self.used += 1

    def release(self) -> None:
        self.used -= 1
        self._freed.set()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()
