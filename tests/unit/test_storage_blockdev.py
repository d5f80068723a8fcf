"""Storage engine on block devices: a loop device over a temporary file."""

from __future__ import annotations

import asyncio
import errno
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.agent.storage import (
    StorageError,
    Volume,
    available_backends,
    open_engine,
    open_volume,
)
from reservoir.lab import loopdev

MiB = 1 << 20
SIZE = 16 * MiB


@pytest.fixture(params=[512, 4096], ids=["512B-sectors", "4K-sectors"])
def loop_device(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    image = tmp_path / "backing.img"
    with image.open("wb") as f:
        f.write(random.Random(1).randbytes(4 * MiB))
        f.truncate(SIZE)
    try:
        with loopdev.loop_device(image, request.param) as dev:
            yield dev, image
    except loopdev.LoopUnavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("kind", available_backends())
def test_loop_device(loop_device: tuple[str, Path], kind: str) -> None:
    dev, image = loop_device
    ref = bytearray(image.read_bytes())
    rnd = random.Random(2)

    async def main() -> None:
        engine = open_engine(kind)
        vol = await open_volume(dev, engine=engine)
        try:
            assert vol.kind == "block"
            assert vol.size == SIZE
            assert vol.block_size in (512, 4096)
            assert await vol.mapped_extents(4096, 8192) == [(4096, 8192, True)]
            for _ in range(60):
                length = rnd.choice([512, 4096, 65536, 1000, rnd.randrange(1, 200000)])
                offset = rnd.randrange(SIZE - length)
                if rnd.random() < 0.5:
                    offset -= offset % vol.block_size
                data = rnd.randbytes(length)
                await vol.write(offset, data)
                ref[offset : offset + length] = data
                assert await vol.read(offset, length) == data
            await vol.flush()
            assert await vol.read(0, SIZE) == ref
            await zeroing(vol, ref)
            with pytest.raises(StorageError) as info:
                await vol.read(SIZE - 1, 2)
            assert info.value.errno == errno.EINVAL
        finally:
            vol.close()
            engine.close()

    asyncio.run(main())
    assert image.read_bytes() == ref


async def zeroing(vol: Volume, ref: bytearray) -> None:
    await vol.write_zeroes(MiB, 64 * 1024)
    ref[MiB : MiB + 64 * 1024] = bytes(64 * 1024)
    await vol.write_zeroes(MiB * 2 + 3, 100)  # unaligned: written as zeros
    ref[MiB * 2 + 3 : MiB * 2 + 103] = bytes(100)
    if vol.thin:
        await vol.discard(3 * MiB, 256 * 1024)
        ref[3 * MiB : 3 * MiB + 256 * 1024] = bytes(256 * 1024)  # loop punches a hole
    else:
        with pytest.raises(StorageError) as info:
            await vol.discard(3 * MiB, 256 * 1024)
        assert info.value.errno == errno.EOPNOTSUPP
    await vol.flush()
    assert await vol.read(0, SIZE) == ref


def test_read_only_block_device(loop_device: tuple[str, Path]) -> None:
    dev, image = loop_device
    head = image.read_bytes()[:8192]

    async def main() -> None:
        vol = await open_volume(dev, read_only=True)
        try:
            assert await vol.read(0, 8192) == head
            with pytest.raises(StorageError) as info:
                await vol.write(0, b"x")
            assert info.value.errno == errno.EROFS
        finally:
            vol.close()

    asyncio.run(main())
    assert os.path.exists(dev)
