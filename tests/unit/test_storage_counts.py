"""An engine's counts (``Engine.counts``): what its volumes' requests did, on real
files, for every available backend."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.agent.storage import (
    Engine,
    IoCounts,
    Volume,
    available_backends,
    open_engine,
    open_volume,
    opened_default_engine,
)

MiB = 1 << 20


@pytest.fixture(params=available_backends())
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    eng = open_engine(request.param)
    yield eng
    eng.close()


def file_of(tmp_path: Path, size: int) -> Path:
    path = tmp_path / "vol.img"
    path.write_bytes(bytes(range(256)) * (size // 256))
    return path


async def _io(vol: Volume) -> None:
    await vol.write(0, b"x" * 8192)
    await vol.write(MiB, bytearray(4096))
    await vol.read(0, 4096)
    await vol.readinto(4096, memoryview(bytearray(4096)))
    await vol.flush()
    await vol.write_zeroes(2 * MiB, 4096)


def test_requests_and_bytes_are_counted_per_operation(tmp_path: Path, engine: Engine) -> None:
    path = file_of(tmp_path, 4 * MiB)

    async def main() -> None:
        vol = await open_volume(str(path), engine=engine, direct=False)
        try:
            await _io(vol)
        finally:
            vol.close()

    asyncio.run(main())
    counts = engine.counts
    assert counts.requests() == {"read": 2, "write": 2, "flush": 1, "discard": 0, "zero": 1}
    assert (counts.read_bytes, counts.written_bytes) == (8192, 8192 + 4096)


def test_a_read_the_page_cache_holds_counts_as_cached(tmp_path: Path, engine: Engine) -> None:
    path = file_of(tmp_path, MiB)

    async def main() -> bytes | None:
        vol = await open_volume(str(path), engine=engine, direct=False)
        try:
            await vol.read(0, 4096)  # now in the page cache, if it was not
            return vol.read_cached(0, 4096)
        finally:
            vol.close()

    cached = asyncio.run(main())
    assert cached is not None  # a file just written is in the page cache
    assert engine.counts.cached_reads >= 1
    assert engine.counts.reads == 2 and engine.counts.read_bytes == 8192


def test_a_failed_request_is_not_counted(tmp_path: Path, engine: Engine) -> None:
    path = file_of(tmp_path, MiB)

    async def main() -> None:
        vol = await open_volume(str(path), engine=engine, read_only=True)
        try:
            with pytest.raises(OSError):
                await vol.write(0, b"x" * 4096)
        finally:
            vol.close()

    asyncio.run(main())
    assert engine.counts == IoCounts()


def test_each_engine_counts_its_own_volumes(tmp_path: Path) -> None:
    path = file_of(tmp_path, MiB)
    one, other = open_engine("threads"), open_engine("threads")

    async def main() -> None:
        vol = await open_volume(str(path), engine=one, direct=False)
        try:
            await vol.write(0, b"y" * 512)
        finally:
            vol.close()

    try:
        asyncio.run(main())
    finally:
        one.close()
        other.close()
    assert one.counts.writes == 1 and other.counts == IoCounts()


def test_the_default_engine_is_found_only_once_opened(tmp_path: Path) -> None:
    path = file_of(tmp_path, MiB)

    async def main() -> tuple[Engine | None, Engine | None, int]:
        before = opened_default_engine()
        vol = await open_volume(str(path), direct=False)  # the loop's default engine
        try:
            await vol.read(0, 512)
        finally:
            vol.close()
        after = opened_default_engine()
        return before, after, 0 if after is None else after.counts.reads

    before, after, reads = asyncio.run(main())
    assert before is None and after is not None and reads == 1
