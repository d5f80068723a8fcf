"""The check at the end of a copy, with fake sides: the whole destination is hashed
again after the last extent; what differs is sent again, and a destination that still
differs fails the copy with the ranges named."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import xxhash
from fake_channels import forget_overlapping, tiled_receipt

from reservoir.agent.initiator import WriteData
from reservoir.agent.iscsi.pdu import FileSpan
from reservoir.agent.transfer import _checkpoint as ck
from reservoir.agent.transfer._endpoints import Channel, PathSpec
from reservoir.agent.transfer._engine import CopyOptions, Run
from reservoir.agent.transfer._errors import CopyError
from reservoir.agent.transfer._plan import ServerPair, make_plan
from reservoir.agent.transfer._progress import Progress
from reservoir.agent.transfer._summary import CopySummary

BLOCK = 512
SIZE = 1 << 20
EXTENT = 64 << 10
ROT = range(3 * EXTENT, 3 * EXTENT + 100)  # in extent 3


class Disk:
    """A destination whose bytes in ``ROT`` read as zeros once ``rotten`` is set
    (``stuck``: for good; otherwise until they are written again)."""

    def __init__(self, size: int, stuck: bool) -> None:
        self.data = bytearray(size)
        self.stuck, self.rotten = stuck, False
        self.bytes_read = 0  # bytes read from it
        self.said: list[str] = []  # "read", "write", "flush", "release", in order

    def rot(self) -> None:
        self.rotten = True
        self.data[ROT.start : ROT.stop] = bytes(len(ROT))

    async def read(self, offset: int, length: int) -> bytes:
        self.said.append("read")
        await asyncio.sleep(0)
        self.bytes_read += length
        return bytes(self.data[offset : offset + length])

    async def readinto(self, offset: int, view: memoryview) -> None:
        view[:] = await self.read(offset, len(view))

    async def write(self, offset: int, data: WriteData) -> None:
        self.said.append("write")
        await asyncio.sleep(0)
        assert not isinstance(data, FileSpan)  # never sent to a channel in memory
        self.data[offset : offset + len(data)] = data
        if self.rotten and self.stuck:
            self.data[ROT.start : ROT.stop] = bytes(len(ROT))

    async def digest(self, offset: int, length: int) -> bytes | None:
        return None

    async def receipt(self, offset: int, length: int) -> bytes | None:
        return None

    async def read_back(self, offset: int, length: int) -> bytes | None:
        return None

    async def flush(self) -> None:
        self.said.append("flush")
        await asyncio.sleep(0)

    async def release(self) -> None:
        self.said.append("release")

    async def close(self) -> None:
        return None


class ReceiptDisk(Disk):
    """A destination that keeps receipts as our target does: the digest of what each
    write received, dropped by any later change over it (``rot`` is such a change)."""

    def __init__(self, size: int, stuck: bool) -> None:
        super().__init__(size, stuck)
        self.receipts: dict[int, tuple[int, bytes]] = {}  # offset -> (length, digest)

    def rot(self) -> None:
        super().rot()
        for start, (length, _) in list(self.receipts.items()):
            if start < ROT.stop and ROT.start < start + length:
                del self.receipts[start]

    async def write(self, offset: int, data: WriteData) -> None:
        await super().write(offset, data)
        assert not isinstance(data, FileSpan)
        self.receipts[offset] = (len(data), xxhash.xxh3_128_digest(data))

    async def receipt(self, offset: int, length: int) -> bytes | None:
        return tiled_receipt(self.receipts, offset, length)


class HashingDisk(Disk):
    """A destination that hashes its own storage as our target does (HASH RANGE) and
    keeps each digest for exactly the range it read, dropped by any later change over
    it (``rot`` is such a change): its read-backs."""

    def __init__(self, size: int, stuck: bool) -> None:
        super().__init__(size, stuck)
        self.hashed = 0  # bytes it read back from its storage to hash
        self.kept: dict[tuple[int, int], bytes] = {}  # (offset, length) -> digest

    def rot(self) -> None:
        super().rot()
        forget_overlapping(self.kept, ROT.start, ROT.stop)

    async def write(self, offset: int, data: WriteData) -> None:
        forget_overlapping(self.kept, offset, offset + len(data))
        await super().write(offset, data)

    async def digest(self, offset: int, length: int) -> bytes | None:
        self.said.append("hash")
        self.hashed += length
        self.kept[(offset, length)] = xxhash.xxh3_128_digest(self.data[offset : offset + length])
        return self.kept[(offset, length)]

    async def read_back(self, offset: int, length: int) -> bytes | None:
        return self.kept.get((offset, length))


class Side:
    device: str | None = None

    def __init__(self, disk: Disk, remote: bool) -> None:
        self.disk, self.remote, self.label = disk, remote, "fake"
        self.hashes = isinstance(disk, HashingDisk)
        self.size, self.block_size = len(disk.data), BLOCK

    async def channel(self, stream: int, path: PathSpec | None) -> Channel:
        return self.disk

    async def close(self) -> None:
        return None


def run_copy(
    tmp_path: Path,
    stuck: bool,
    rot: bool = True,
    verification: str = "storage",
    disk: type[Disk] | None = None,
) -> tuple[Disk, Disk, CopySummary]:
    disk = disk or (ReceiptDisk if verification == "receipt" else Disk)
    source, dest = Disk(SIZE, stuck=False), disk(SIZE, stuck)
    source.data[:] = os.urandom(SIZE)
    plan = make_plan(0, SIZE, extent_size=EXTENT, block_size=BLOCK, pair=ServerPair("s", "d", 2))

    def progress(p: Progress) -> None:  # the last extent done: extent 3 rots
        if rot and p.extents_done == p.extents_total and not dest.rotten:
            dest.rot()

    run = Run(
        plan,
        Side(source, False),
        Side(dest, True),
        paths=[],
        options=CopyOptions(
            streams=2, extent_size=EXTENT, piece_size=16 << 10, verification=verification
        ),
        checkpoint=ck.Checkpoint(tmp_path / "ck.json", ck.CopyKey("s", "d", 0, SIZE, EXTENT)),
        progress=progress,
    )
    return source, dest, asyncio.run(run.execute())


def test_an_extent_that_differs_at_the_end_is_sent_again(tmp_path: Path) -> None:
    source, dest, summary = run_copy(tmp_path, stuck=False)
    assert dest.rotten and dest.data == source.data
    assert summary.verified and summary.end_mismatches == 1
    assert summary.verification.startswith("whole destination range read back")


def test_a_storage_verified_copy_reads_its_destination_back_once(tmp_path: Path) -> None:
    # a destination that cannot hash is read back by the check at the end only:
    # checking each extent as it is written too would read every byte back twice
    _, dest, summary = run_copy(tmp_path, stuck=False, rot=False)
    assert summary.verified and summary.mode == "storage" and summary.end_mismatches == 0
    assert dest.bytes_read == SIZE


def test_a_receipt_verified_copy_checks_the_end_by_receipts_and_reads_nothing_back(
    tmp_path: Path,
) -> None:
    source, dest, summary = run_copy(tmp_path, stuck=False, rot=False, verification="receipt")
    assert dest.data == source.data and dest.bytes_read == 0
    assert summary.verified and summary.mode == "receipt" and summary.end_mismatches == 0
    extents = SIZE // EXTENT
    assert sum(s.end_by_receipt for s in summary.streams) == extents
    assert f"after the last extent, {extents} of {extents} checked again by those receipts" in (
        summary.verification
    )


def test_a_receipt_verified_copy_finds_a_change_after_its_last_write(tmp_path: Path) -> None:
    """A change over a written extent drops its receipts: the check at the end hashes
    that extent's storage, finds it different and sends it again."""
    source, dest, summary = run_copy(tmp_path, stuck=False, verification="receipt")
    assert dest.rotten and dest.data == source.data
    assert summary.verified and summary.end_mismatches == 1
    assert dest.bytes_read == EXTENT  # the changed extent only
    # 15 by receipts at the end, the changed one by storage, then by receipts once resent
    assert sum(s.end_by_receipt for s in summary.streams) == SIZE // EXTENT


def test_the_destination_flushes_while_the_end_check_runs_and_releases_after(
    tmp_path: Path,
) -> None:
    """One round trip where the flush waited for the check: it goes out with the check's
    first questions, and the hold is released once both are done."""
    _, dest, summary = run_copy(tmp_path, stuck=False, rot=False)
    end = dest.said[len(dest.said) - dest.said[::-1].index("write") :]  # after the writes
    assert summary.verified and end.count("flush") == 1
    assert "read" in end[end.index("flush") :]  # the check still reading
    assert end[-1] == "release"


def test_extents_sent_again_at_the_end_are_flushed_again_before_the_release(
    tmp_path: Path,
) -> None:
    source, dest, summary = run_copy(tmp_path, stuck=False)
    assert summary.verified and summary.end_mismatches == 1 and dest.data == source.data
    last_write = len(dest.said) - 1 - dest.said[::-1].index("write")
    assert dest.said[last_write:].count("flush") == 1
    assert dest.said[-1] == "release"


def test_a_destination_that_still_differs_fails_the_copy_naming_the_range(
    tmp_path: Path,
) -> None:
    first, last = 3 * EXTENT, 4 * EXTENT - 1
    with pytest.raises(CopyError, match=f"still differs .*bytes {first}-{last} of destination 0"):
        run_copy(tmp_path, stuck=True)


def test_a_storage_verified_copy_hashes_each_extent_as_written_and_ends_by_its_read_backs(
    tmp_path: Path,
) -> None:
    """Into a destination that hashes its storage, each extent is hashed once, as it is
    written (off the network's path); the check at the end finds them unchanged since
    by the digests the destination kept, and reads nothing again."""
    source, dest, summary = run_copy(tmp_path, stuck=False, rot=False, disk=HashingDisk)
    assert isinstance(dest, HashingDisk)
    assert dest.data == source.data and dest.hashed == SIZE and dest.bytes_read == 0
    assert summary.verified and summary.mode == "storage" and summary.end_mismatches == 0
    extents = SIZE // EXTENT
    assert sum(s.end_by_read_back for s in summary.streams) == extents
    assert summary.verification.startswith("every extent hashed from the destination's storage")
    assert f"{extents} of {extents} found unchanged since" in summary.verification
    assert (
        dest.said.count("hash") == extents and "hash" not in dest.said[dest.said.index("flush") :]
    )


def test_a_storage_verified_copy_finds_a_change_after_an_extent_was_read_back(
    tmp_path: Path,
) -> None:
    """A change over an extent after it was hashed drops what the destination kept of
    it: the check at the end hashes that extent's storage again, finds it different
    and sends it again."""
    source, dest, summary = run_copy(tmp_path, stuck=False, disk=HashingDisk)
    assert isinstance(dest, HashingDisk)
    assert dest.rotten and dest.data == source.data
    assert summary.verified and summary.end_mismatches == 1
    # every extent as written, the changed one at the end, then once more as resent
    assert dest.hashed == SIZE + 2 * EXTENT
    assert sum(s.end_by_read_back for s in summary.streams) == SIZE // EXTENT


def test_a_storage_verified_copy_whose_extent_stays_changed_fails_naming_it(
    tmp_path: Path,
) -> None:
    first, last = 3 * EXTENT, 4 * EXTENT - 1
    with pytest.raises(CopyError, match=f"still differs .*bytes {first}-{last} of destination 0"):
        run_copy(tmp_path, stuck=True, disk=HashingDisk)
