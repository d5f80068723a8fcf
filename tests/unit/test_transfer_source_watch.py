"""A copy's watch on a local source (``_source_watch.SourceWatch``): a real file, marked
before and checked after, hashed again where its mark moved."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import xxhash

from reservoir.agent.storage import open_volume
from reservoir.agent.transfer import SourceChangedError
from reservoir.agent.transfer._checkpoint import Checkpoint, CopyKey
from reservoir.agent.transfer._endpoints import LocalSide
from reservoir.agent.transfer._plan import Plan, ServerPair, make_plan
from reservoir.agent.transfer._source_watch import SourceWatch

EXTENT = 64 << 10
SIZE = 8 * EXTENT


def plan_of() -> Plan:
    return make_plan(0, SIZE, extent_size=EXTENT, block_size=512, pair=ServerPair("s", "d", 1))


async def check_after(path: Path, change: str, tmp_path: Path) -> tuple[SourceWatch, Checkpoint]:
    """Marks ``path``, records every extent as sent, changes it, checks it."""
    async with await open_volume(path, read_only=True) as volume:
        data = path.read_bytes()
        key = CopyKey(str(path), "dest", 0, SIZE, EXTENT)
        checkpoint = Checkpoint(tmp_path / "ck.json", key)
        watch = SourceWatch(
            LocalSide(volume, str(path), path),
            plan_of(),
            checkpoint,
            verify=True,
            changes_since=None,
            phase=lambda what: None,
        )
        for e in plan_of().extents:
            checkpoint.done[e.id] = xxhash.xxh3_128_digest(data[e.offset : e.end])
        with open(path, "r+b") as f:
            if change == "touch":
                f.write(data[:10])
            elif change == "cut":
                f.truncate(SIZE // 2)
        await watch.check([])
        return watch, checkpoint


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "source.img"
    path.write_bytes(os.urandom(SIZE))
    return path


def test_an_unwritten_source_is_watched_and_not_hashed_again(source: Path, tmp_path: Path) -> None:
    watch, _ = asyncio.run(check_after(source, "none", tmp_path))
    assert watch.watched(end_checked=True) == "its modification and change times"
    assert not watch.rehashed


def test_a_source_written_with_the_same_bytes_is_hashed_again_and_found_equal(
    source: Path, tmp_path: Path
) -> None:
    watch, checkpoint = asyncio.run(check_after(source, "touch", tmp_path))
    assert watch.rehashed and len(checkpoint.done) == 8


def test_a_source_cut_short_while_it_was_copied_fails_saying_it_could_not_be_hashed_again(
    source: Path, tmp_path: Path
) -> None:
    with pytest.raises(SourceChangedError, match="could not be hashed again while unchanged"):
        asyncio.run(check_after(source, "cut", tmp_path))
