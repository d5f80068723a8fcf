"""Which extents of a local source differ from what was sent: a real file hashed again
(``_source_changes``), and what a resume's checkpoint keeps of it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import xxhash

from reservoir.agent.storage import ChangeMark, Volume, open_volume
from reservoir.agent.transfer._checkpoint import Checkpoint, CopyKey
from reservoir.agent.transfer._plan import Extent, Plan, ServerPair, make_plan
from reservoir.agent.transfer._source_changes import (
    Rehasher,
    SourceChanges,
    find_changes,
    local_rehasher,
    merged_ranges,
    recheck_moved_source,
)

EXTENT = 64 << 10
SIZE = 16 * EXTENT


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "source.img"
    path.write_bytes(os.urandom(SIZE))
    return path


def plan_of(size: int = SIZE) -> Plan:
    return make_plan(0, size, extent_size=EXTENT, block_size=512, pair=ServerPair("s", "d", 2))


def digests_of(path: Path, plan: Plan) -> dict[int, bytes]:
    data = path.read_bytes()
    return {e.id: xxhash.xxh3_128_digest(data[e.offset : e.end]) for e in plan.extents}


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(1)
        f.seek(offset)
        f.write(bytes([old[0] ^ 0xFF]))


async def changes_in(path: Path, done: dict[int, bytes]) -> SourceChanges | None:
    async with await open_volume(path, read_only=True) as volume:
        return await find_changes(local_rehasher(volume), plan_of(), done)


def test_the_extents_written_since_they_were_read_are_found_and_no_others(
    source: Path,
) -> None:
    done = digests_of(source, plan_of())
    flip(source, 3 * EXTENT + 17)
    flip(source, 11 * EXTENT)
    changes = asyncio.run(changes_in(source, done))
    assert changes is not None
    assert [e.id for e in changes.changed] == [3, 11]
    assert changes.checked == 16 and changes.bytes == 2 * EXTENT


def test_only_the_done_extents_are_hashed_again(source: Path) -> None:
    done = {i: d for i, d in digests_of(source, plan_of()).items() if i < 4}
    flip(source, 9 * EXTENT)  # not done: whatever a resume sends of it is read then
    changes = asyncio.run(changes_in(source, done))
    assert changes is not None and changes.changed == () and changes.checked == 4


def test_a_source_written_while_it_is_hashed_again_gives_no_answer(
    source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = digests_of(source, plan_of())
    marks = iter([ChangeMark("times", "1"), ChangeMark("times", "2")])
    monkeypatch.setattr(Volume, "change_mark", lambda self: next(marks))
    assert asyncio.run(changes_in(source, done)) is None


def test_a_source_that_cannot_hash_an_extent_gives_no_answer(source: Path) -> None:
    """A remote source whose target refuses the extent's size cannot say it is equal."""
    done = digests_of(source, plan_of())

    async def mark() -> ChangeMark:
        return ChangeMark("times", "same")

    async def digest(offset: int, length: int) -> bytes | None:
        return None if offset == 7 * EXTENT else done[offset // EXTENT]

    refusing = Rehasher("remote", mark, digest, 8)
    assert asyncio.run(find_changes(refusing, plan_of(), done)) is None


def test_adjacent_extents_are_named_as_one_range_and_long_lists_are_counted() -> None:
    extents = [Extent(i, i * 10, 10) for i in (0, 1, 2, 5, 7, 9, 11, 13)]
    assert merged_ranges(extents[:4]) == [(0, 30), (50, 60)]
    changes = SourceChanges(tuple(extents), 20, ChangeMark("t", "s"))
    assert changes.describe() == (
        "8 of 20 extents differ from what was sent "
        "(source bytes 0-29, 50-59, 70-79, 90-99 and 2 more ranges)"
    )


def checkpoint_of(tmp_path: Path, source: Path, mark: ChangeMark) -> Checkpoint:
    key = CopyKey(str(source), "dest", 0, SIZE, EXTENT)
    return Checkpoint(tmp_path / "ck.json", key, digests_of(source, plan_of()), set(), mark)


async def recheck(path: Path, checkpoint: Checkpoint) -> SourceChanges | None:
    async with await open_volume(path, read_only=True) as volume:
        return await recheck_moved_source(local_rehasher(volume), plan_of(), checkpoint)


def test_a_resume_whose_source_moved_keeps_the_extents_that_still_match(
    tmp_path: Path, source: Path
) -> None:
    checkpoint = checkpoint_of(tmp_path, source, ChangeMark("times", "as it was"))
    flip(source, 6 * EXTENT + 1)
    changes = asyncio.run(recheck(source, checkpoint))
    assert changes is not None and [e.id for e in changes.changed] == [6]
    assert sorted(checkpoint.done) == [i for i in range(16) if i != 6]
    assert checkpoint.source_mark == changes.mark != ChangeMark("times", "as it was")


def test_a_resume_whose_source_did_not_move_hashes_nothing(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = asyncio.run(mark_of(source))
    checkpoint = checkpoint_of(tmp_path, source, mark)
    hashed: list[int] = []
    monkeypatch.setattr(Volume, "hash_range", lambda *a: hashed.append(1))
    assert asyncio.run(recheck(source, checkpoint)) is None
    assert len(checkpoint.done) == 16 and checkpoint.source_mark == mark and not hashed


async def mark_of(path: Path) -> ChangeMark:
    async with await open_volume(path, read_only=True) as volume:
        return volume.change_mark()
