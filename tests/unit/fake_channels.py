"""A volume in memory for tests of what reads and writes channels (streams, a copy's
run): every command can take ``delay`` seconds, fail, corrupt or hash, as told."""

from __future__ import annotations

import asyncio

from reservoir.agent.initiator import ConnectionLostError, WriteData
from reservoir.agent.iscsi.pdu import FileSpan
from reservoir.agent.transfer._stream import digest


def tiled_receipt(received: dict[int, tuple[int, bytes]], offset: int, length: int) -> bytes | None:
    """What our target answers for the range's receipts, from ``received`` (offset ->
    (length, digest) of each write): the digest of the digests of the writes that tile
    the range exactly, in order; None where they do not."""
    parts, at = [], offset
    while at < offset + length:
        if at not in received:
            return None
        size, piece_digest = received[at]
        parts.append(piece_digest)
        at += size
    return digest(b"".join(parts)) if at == offset + length else None


def forget_overlapping(kept: dict[tuple[int, int], bytes], start: int, end: int) -> None:
    """Drops the digests kept for (offset, length) ranges that overlap [start, end), as
    our target drops its read-backs at any change over them."""
    for offset, length in [k for k in kept if k[0] < end and start < sum(k)]:
        del kept[(offset, length)]


class Memory:
    """A fake volume: ``delay`` seconds per command; fails after ``fail_after`` writes;
    corrupts the first ``corrupt`` writes; hashes ranges itself when ``hashes``."""

    def __init__(self, data: bytearray, delay: float = 0.0) -> None:
        self.data, self.delay = data, delay
        self.fail_after: int | None = None
        self.corrupt = 0
        self.writes = self.reads = self.digests = 0
        self.hashes = False
        self.keeps_receipts = False
        self.received: dict[int, tuple[int, bytes]] = {}  # offset: (length, digest)
        self.receipts_asked = 0
        self.read_backs: dict[tuple[int, int], bytes] = {}  # (offset, length): digest
        self.in_flight = self.most_in_flight = 0

    async def read(self, offset: int, length: int) -> bytes:
        self.reads += 1
        await asyncio.sleep(self.delay)
        if self.fail_after is not None and self.writes >= self.fail_after:
            raise ConnectionLostError("dropped by the test")
        return bytes(self.data[offset : offset + length])

    async def digest(self, offset: int, length: int) -> bytes | None:
        if not self.hashes:
            return None
        self.digests += 1
        await asyncio.sleep(self.delay)
        self.read_backs[(offset, length)] = digest(self.data[offset : offset + length])
        return self.read_backs[(offset, length)]

    async def read_back(self, offset: int, length: int) -> bytes | None:
        """Like our target's read-backs: what digest() gave over exactly the range,
        while no write has gone over it since."""
        return self.read_backs.get((offset, length)) if self.hashes else None

    async def receipt(self, offset: int, length: int) -> bytes | None:
        """Like our target's receipts: digests of the writes that tile the range."""
        if not self.keeps_receipts:
            return None
        self.receipts_asked += 1
        return tiled_receipt(self.received, offset, length)

    async def readinto(self, offset: int, view: memoryview) -> None:
        view[:] = await self.read(offset, len(view))

    async def write(self, offset: int, data: WriteData) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        self.writes += 1
        if self.fail_after is not None and self.writes > self.fail_after:
            raise ConnectionLostError("dropped by the test")
        assert not isinstance(data, FileSpan)  # never sent to a channel in memory
        self.data[offset : offset + len(data)] = data
        self.received[offset] = (len(data), digest(data))
        forget_overlapping(self.read_backs, offset, offset + len(data))
        if self.corrupt:
            self.corrupt -= 1
            self.data[offset] ^= 0xFF

    async def flush(self) -> None:
        return None

    async def release(self) -> None:
        return None

    async def close(self) -> None:
        return None
