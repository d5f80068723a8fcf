"""Storage engine benchmark (not a test): ``python -m reservoir.agent.storage.bench``.

On a temporary file (256 MiB by default) for each backend, prints
4 KiB random-read IOPS at queue depth 32 and 128 KiB sequential read and write
MB/s.  io_uring runs twice: with O_DIRECT for aligned requests (the default)
and buffered; buffered runs first read the whole file, so they measure the page
cache.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
from collections.abc import Awaitable, Callable

import uvloop

from . import Volume, available_backends, open_engine, open_volume

MiB = 1 << 20


def make_file(directory: str | None, size: int) -> str:
    fd, path = tempfile.mkstemp(prefix="reservoir-bench-", suffix=".img", dir=directory)
    chunk = os.urandom(MiB)
    with os.fdopen(fd, "wb") as f:
        for _ in range(size // MiB):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    return path


async def run_workers(
    qd: int, seconds: float, step: Callable[[int], Awaitable[int]]
) -> tuple[int, int, float]:
    """Runs qd coroutines calling step(i) until the time is up: (ops, bytes, elapsed)."""
    deadline = time.perf_counter() + seconds
    counts = [0, 0]
    seq = iter(range(1 << 62))

    async def worker() -> None:
        while time.perf_counter() < deadline:
            done = await step(next(seq))  # not "counts[1] += await": that loses updates
            counts[0] += 1
            counts[1] += done

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(qd)))
    return counts[0], counts[1], time.perf_counter() - start


async def random_reads(vol: Volume, qd: int, seconds: float) -> float:
    blocks = vol.size // 4096
    rnd = random.Random(1)

    async def step(_: int) -> int:
        data = await vol.read(rnd.randrange(blocks) * 4096, 4096)
        return len(data)

    ops, _, elapsed = await run_workers(qd, seconds, step)
    return ops / elapsed


async def sequential(vol: Volume, qd: int, seconds: float, write: bool) -> float:
    size = 128 * 1024
    chunks = vol.size // size
    payload = os.urandom(size)

    async def step(i: int) -> int:
        offset = (i % chunks) * size
        if write:
            await vol.write(offset, payload)
        else:
            await vol.read(offset, size)
        return size

    _, nbytes, elapsed = await run_workers(qd, seconds, step)
    return nbytes / elapsed / 1e6


async def bench_one(path: str, kind: str, direct: bool, args: argparse.Namespace) -> str:
    engine = open_engine(kind, depth=max(64, args.qd))
    try:
        vol = await open_volume(path, engine=engine, direct=direct)
        try:
            if not vol.direct:  # a direct run before invalidated the cached pages
                for offset in range(0, vol.size, MiB):
                    await vol.read(offset, min(MiB, vol.size - offset))
            iops = await random_reads(vol, args.qd, args.seconds)
            seq_r = await sequential(vol, 8, args.seconds, write=False)
            seq_w = await sequential(vol, 8, args.seconds, write=True)
            await vol.flush()
            mode = "direct" if vol.direct else "buffered"
        finally:
            vol.close()
    finally:
        engine.close()
    return (
        f"{kind:9} {mode:8}  4KiB rand read QD{args.qd}: {iops:9.0f} IOPS   "
        f"128KiB seq read: {seq_r:7.0f} MB/s   seq write: {seq_w:7.0f} MB/s"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--size-mib", type=int, default=256)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--qd", type=int, default=32)
    p.add_argument("--dir", default=None, help="where to put the temporary file")
    p.add_argument("--uvloop", action="store_true", help="run on uvloop")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    path = make_file(args.dir, args.size_mib * MiB)
    runs = [("io_uring", True), ("io_uring", False)] if "io_uring" in available_backends() else []
    runs.append(("threads", False))
    loop_name = "uvloop" if args.uvloop else "asyncio"
    print(f"file {path} ({args.size_mib} MiB), {args.seconds:g} s per figure, {loop_name}")
    try:
        for kind, direct in runs:
            coro = bench_one(path, kind, direct, args)
            if args.uvloop:
                print(uvloop.run(coro), flush=True)
            else:
                print(asyncio.run(coro), flush=True)
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
