"""Storage engine: the public API on regular files, for every available backend."""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import random
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from reservoir.agent import storage
from reservoir.agent.storage import (
    Engine,
    StorageError,
    Volume,
    available_backends,
    open_engine,
    open_volume,
)
from reservoir.agent.storage import _engine as engine_mod
from reservoir.agent.storage._base import Handle
from reservoir.agent.storage._volume import _until_done

T = TypeVar("T")
MiB = 1 << 20


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


@pytest.fixture(params=available_backends())
def kind(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def engine(kind: str) -> Iterator[Engine]:
    eng = open_engine(kind)
    yield eng
    eng.close()


def make_file(path: Path, size: int, seed: int = 0) -> bytearray:
    """A file of random bytes; returns its content as the reference."""
    data = bytearray(random.Random(seed).randbytes(size))
    path.write_bytes(data)
    return data


def with_volume(
    path: Path, engine: Engine, body: Callable[[Volume], Awaitable[T]], **kw: bool
) -> T:
    async def main() -> T:
        vol = await open_volume(str(path), engine=engine, **kw)
        try:
            return await body(vol)
        finally:
            vol.close()

    return asyncio.run(main())


def test_public_api() -> None:
    assert set(storage.__all__) == {
        "BULK_WRITE",
        "ChangeMark",
        "DirectIo",
        "Engine",
        "IoCounts",
        "StorageError",
        "Volume",
        "available_backends",
        "open_engine",
        "opened_default_engine",
        "read_back_buffer_bytes",
        "open_volume",
        "volume_identity",
    }
    assert issubclass(StorageError, OSError)
    assert available_backends()[-1] == "threads"


def test_io_uring_is_available_when_the_extension_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RESERVOIR_STORAGE_ENGINE", raising=False)
    try:
        from reservoir.agent.storage import _uring  # noqa: F401, PLC0415 - optional extension
    except ImportError:
        pytest.skip("the _uring extension is not built here")
    reason = engine_mod.uring_unavailable()
    if reason is not None:
        pytest.skip(f"io_uring not usable here: {reason}")
    assert available_backends() == ["io_uring", "threads"]
    eng = open_engine()
    try:
        assert eng.kind == "io_uring"
    finally:
        eng.close()


def test_engine_kinds(kind: str) -> None:
    eng = open_engine(kind, depth=32)
    assert eng.kind == kind
    assert eng.depth == 32
    eng.close()
    eng.close()  # idempotent
    assert eng.closed


def test_unknown_engine_kind_is_a_storage_error_naming_the_kinds() -> None:
    with pytest.raises(StorageError, match=r"unknown storage engine kind 'spdk' \(auto, ") as e:
        open_engine("spdk")
    assert e.value.errno == errno.EINVAL


def test_env_var_forces_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESERVOIR_STORAGE_ENGINE", "threads")
    eng = open_engine()
    assert eng.kind == "threads"
    eng.close()


def test_auto_falls_back_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("RESERVOIR_STORAGE_ENGINE", raising=False)
    monkeypatch.setattr(engine_mod, "uring_unavailable", lambda: "testing the fallback")
    monkeypatch.setattr(engine_mod, "_warned", set())
    with caplog.at_level(logging.WARNING, logger=engine_mod.__name__):
        eng = open_engine("auto")
    assert eng.kind == "threads"
    eng.close()
    assert "testing the fallback" in caplog.text
    assert "threads" in caplog.text
    with pytest.raises(StorageError) as info:
        open_engine("io_uring")
    assert info.value.errno == errno.ENOSYS


def test_volume_attributes(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "vol.img"
    make_file(path, 3 * MiB + 512)

    async def body(vol: Volume) -> None:
        assert vol.path == str(path)
        assert vol.size == 3 * MiB + 512
        assert vol.block_size == 512
        assert vol.kind == "file"
        assert vol.read_only is False
        assert vol.engine is engine
        assert str(path) in repr(vol)

    with_volume(path, engine, body)


def test_round_trip_random_offsets(tmp_path: Path, engine: Engine) -> None:
    size = 4 * MiB
    path = tmp_path / "vol.img"
    ref = make_file(path, size)
    rnd = random.Random(42)

    async def body(vol: Volume) -> None:
        for _ in range(150):
            length = rnd.choice(
                [1, 512, 4096, 4097, 65536, 131072, 131073, rnd.randrange(1, 300000)]
            )
            offset = rnd.randrange(size - length + 1)
            if rnd.random() < 0.5:
                offset -= offset % 4096  # aligned: O_DIRECT where the engine uses it
            data = rnd.randbytes(length)
            await vol.write(offset, data)
            ref[offset : offset + length] = data
            start = rnd.randrange(size - length + 1)
            assert await vol.read(start, length) == ref[start : start + length]
        await vol.flush()
        assert await vol.read(0, size) == ref

    with_volume(path, engine, body)
    assert path.read_bytes() == ref


def test_large_requests(tmp_path: Path, engine: Engine) -> None:
    size = 20 * MiB
    path = tmp_path / "vol.img"
    ref = make_file(path, size)
    big = random.Random(7).randbytes(16 * MiB)

    async def body(vol: Volume) -> None:
        for offset in (0, 12345, 4 * MiB):
            await vol.write(offset, big)
            ref[offset : offset + len(big)] = big
            assert await vol.read(offset, len(big)) == big
        buf = bytearray(16 * MiB + 1)
        await vol.readinto(777, memoryview(buf))
        assert buf == ref[777 : 777 + len(buf)]

    with_volume(path, engine, body)
    assert path.read_bytes() == ref


def test_readinto_finishes_what_the_page_cache_filled_in_part(
    tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "vol.img"
    ref = make_file(path, 4 * MiB)
    calls: list[int] = []
    preadv = os.preadv

    def half_cached(fd: int, buffers: list[memoryview], offset: int, flags: int = 0) -> int:
        if flags != os.RWF_NOWAIT:
            return preadv(fd, buffers, offset, flags)
        half = len(buffers[0]) // 2
        buffers[0][:half] = os.pread(fd, half, offset)
        calls.append(flags)
        return half

    monkeypatch.setattr(os, "preadv", half_cached)

    async def body(vol: Volume) -> None:
        buf = bytearray(MiB)
        await vol.readinto(12345, memoryview(buf))
        assert buf == ref[12345 : 12345 + MiB]
        assert calls == ([] if vol.direct else [os.RWF_NOWAIT])  # O_DIRECT skips the cache

    with_volume(path, engine, body)


def test_writeback_starts_over_the_span_of_every_batch_of_writes(
    tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "vol.img"
    make_file(path, 4 * MiB)
    monkeypatch.setattr(storage._volume, "WRITEBACK_EVERY", 16384)
    started: list[tuple[int, int]] = []
    real = engine._writeback

    def record(h: Handle, offset: int, length: int) -> Awaitable[None]:
        started.append((offset, length))
        return real(h, offset, length)

    async def body(vol: Volume) -> None:
        vol.writeback = True
        await vol.write(65536, b"x" * 8192)
        await vol.write(4096, b"y" * 8192)  # 16 KiB written: one writeback, 4096..73728
        await vol.write(0, b"z" * 4096)  # not yet
        await asyncio.sleep(0.05)  # the writeback completes on its own
        assert await vol.read(4096, 8192) == b"y" * 8192
        assert started == ([] if vol.direct else [(4096, 69632)])

    engine._writeback = record  # type: ignore[method-assign]
    with_volume(path, engine, body, direct=False)


def test_unaligned_and_mixed_requests(tmp_path: Path, engine: Engine) -> None:
    size = 1 * MiB
    path = tmp_path / "vol.img"
    ref = make_file(path, size)
    rnd = random.Random(3)
    cases = [(1, 1), (511, 2), (4095, 4098), (4096, 4096), (8192, 1), (1000, 70000)]

    async def body(vol: Volume) -> None:
        for offset, length in cases:
            data = rnd.randbytes(length)
            await vol.write(offset, data)
            ref[offset : offset + length] = data
            # aligned reads around unaligned writes and the other way round
            start = offset - offset % 4096
            end = min(size, -(-(offset + length) // 4096) * 4096)
            assert await vol.read(start, end - start) == ref[start:end]
            assert await vol.read(offset, length) == data
        await vol.write(size - 3, b"end")
        assert await vol.read(size - 4, 4) == ref[size - 4 : size - 3] + b"end"

    with_volume(path, engine, body)


def test_non_byte_buffers(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "vol.img"
    make_file(path, 64 * 1024)
    words = memoryview(bytearray(range(256)) * 4).cast("I")  # 1 KiB of 4-byte items

    async def body(vol: Volume) -> None:
        await vol.write(100, words)
        await vol.write(2000, bytearray(b"xyz"))
        await vol.write(3000, memoryview(b"0123456789")[::2])  # not contiguous
        assert await vol.read(100, 1024) == words.tobytes()
        assert await vol.read(2000, 3) == b"xyz"
        assert await vol.read(3000, 5) == b"02468"
        out = bytearray(5)
        await vol.readinto(3000, memoryview(out))
        assert out == b"02468"
        await vol.write(0, b"")
        assert await vol.read(0, 0) == b""
        with pytest.raises(ValueError):
            await vol.readinto(0, memoryview(b"read-only"))

    with_volume(path, engine, body)


def test_concurrency(tmp_path: Path, engine: Engine) -> None:
    blocks = 512
    path = tmp_path / "vol.img"
    ref = make_file(path, blocks * 4096)
    rnd = random.Random(9)

    async def body(vol: Volume) -> None:
        order = list(range(blocks))
        rnd.shuffle(order)
        written, read = order[:200], order[200:400]
        payloads = {b: rnd.randbytes(4096) for b in written}
        writes = [vol.write(b * 4096, payloads[b]) for b in written]
        reads = [vol.read(b * 4096, 4096) for b in read]
        _, results = await asyncio.gather(asyncio.gather(*writes), asyncio.gather(*reads))
        for b, data in zip(read, results, strict=True):
            assert data == ref[b * 4096 : (b + 1) * 4096]
        for b in written:
            ref[b * 4096 : (b + 1) * 4096] = payloads[b]
        unaligned = [vol.read(b * 4096 + 50, 4000) for b in order]
        for b, data in zip(order, await asyncio.gather(*unaligned), strict=True):
            assert data == ref[b * 4096 + 50 : b * 4096 + 4050]

    with_volume(path, engine, body)
    assert path.read_bytes() == ref


def test_sparse_file_discard_zeroes_extents(tmp_path: Path, engine: Engine) -> None:
    size = 8 * MiB
    path = tmp_path / "sparse.img"
    with path.open("wb") as f:
        f.truncate(size)
    payload = random.Random(5).randbytes(256 * 1024)

    async def body(vol: Volume) -> None:
        assert await vol.read(0, 4096) == bytes(4096)
        extents = await vol.mapped_extents(0, size)
        assert extents == [(0, size, False)]
        await vol.write(MiB, payload)
        await vol.flush()
        extents = await vol.mapped_extents(0, size)
        assert_covers(extents, 0, size)
        assert any(m and o <= MiB < o + n for o, n, m in extents)
        assert not any(m and o + n <= MiB for o, n, m in extents)
        await vol.write_zeroes(MiB + 4096, 8192)
        assert await vol.read(MiB + 4096, 8192) == bytes(8192)
        await vol.write_zeroes(MiB + 1, 10)  # unaligned: may fall back to writing zeros
        assert await vol.read(MiB, 12) == payload[:1] + bytes(10) + payload[11:12]
        if not vol.thin:
            with pytest.raises(StorageError) as info:
                await vol.discard(MiB, 64 * 1024)
            assert info.value.errno == errno.EOPNOTSUPP
            return
        await vol.discard(MiB, 64 * 1024)
        assert await vol.read(MiB, 64 * 1024) == bytes(64 * 1024)
        assert await vol.read(MiB + 64 * 1024, 4096) == payload[64 * 1024 : 68 * 1024]
        extents = await vol.mapped_extents(MiB, 128 * 1024)
        assert_covers(extents, MiB, 128 * 1024)
        assert extents[0] == (MiB, 64 * 1024, False)
        assert extents[-1][2] is True
        assert await vol.mapped_extents(5, 0) == []

    with_volume(path, engine, body)
    assert path.stat().st_size == size


def assert_covers(extents: list[tuple[int, int, bool]], offset: int, length: int) -> None:
    pos = offset
    for o, n, _ in extents:
        assert o == pos and n > 0
        pos += n
    assert pos == offset + length


def test_errors_open(tmp_path: Path, engine: Engine) -> None:
    missing = tmp_path / "missing.img"
    with pytest.raises(StorageError) as info:
        run(open_volume(str(missing), engine=engine))
    assert info.value.errno == errno.ENOENT
    assert info.value.operation == "open"
    assert str(missing) in str(info.value)
    assert "open" in str(info.value)
    with pytest.raises(StorageError) as info:
        run(open_volume(str(tmp_path), engine=engine))
    assert info.value.errno == errno.EISDIR
    assert "directory" in str(info.value)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(StorageError) as info:
        run(open_volume(str(fifo), engine=engine))
    assert info.value.errno == errno.EINVAL


def test_errors_out_of_range(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "vol.img"
    ref = make_file(path, 64 * 1024)

    async def body(vol: Volume) -> None:
        for offset, length in [(64 * 1024, 1), (64 * 1024 - 10, 11), (-1, 10), (0, -1)]:
            with pytest.raises(StorageError) as info:
                await vol.read(offset, length)
            assert info.value.errno == errno.EINVAL
            assert str(path) in str(info.value) and "read" in str(info.value)
            if length > 0:
                with pytest.raises(StorageError) as info:
                    await vol.write(offset, b"x" * length)
                assert info.value.errno == errno.EINVAL
            with pytest.raises(StorageError):
                await vol.discard(offset, length)
            with pytest.raises(StorageError):
                await vol.mapped_extents(offset, length)
        assert await vol.read(64 * 1024, 0) == b""

    with_volume(path, engine, body)
    assert path.read_bytes() == ref


def test_read_only_volume(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "vol.img"
    ref = make_file(path, 64 * 1024)

    async def body(vol: Volume) -> None:
        assert vol.read_only
        assert await vol.read(0, 100) == ref[:100]
        for call in (
            vol.write(0, b"no"),
            vol.discard(0, 4096),
            vol.write_zeroes(0, 4096),
        ):
            with pytest.raises(StorageError) as info:
                await call
            assert info.value.errno == errno.EROFS
        await vol.flush()

    with_volume(path, engine, body, read_only=True)
    assert path.read_bytes() == ref


def test_closed_volume(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "vol.img"
    make_file(path, 8192)

    async def main() -> None:
        vol = await open_volume(str(path), engine=engine)
        pending = asyncio.ensure_future(vol.read(0, 8192))
        await asyncio.sleep(0)
        vol.close()  # descriptors close once the read in flight is done
        assert len(await pending) == 8192
        assert vol.closed
        with pytest.raises(StorageError) as info:
            await vol.read(0, 1)
        assert info.value.errno == errno.EBADF
        vol.close()

    run(main())


def test_file_shrunk_under_the_volume(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "vol.img"
    make_file(path, 64 * 1024)

    async def body(vol: Volume) -> None:
        os.truncate(path, 10000)
        with pytest.raises(StorageError) as info:
            await vol.read(8192, 8192)  # short read, then end of file
        assert info.value.errno == errno.EIO
        with pytest.raises(StorageError) as info:
            await vol.read(32768, 4096)
        assert info.value.errno == errno.EIO

    with_volume(path, engine, body)


def test_refresh_size(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "vol.img"
    make_file(path, 8192)

    async def body(vol: Volume) -> None:
        os.truncate(path, 3 * 8192)
        with pytest.raises(StorageError):
            await vol.read(8192, 1)
        assert await vol.refresh_size() == 3 * 8192
        assert vol.size == 3 * 8192
        assert await vol.read(8192, 8192) == bytes(8192)

    with_volume(path, engine, body)


def test_cancelled_requests_leave_the_volume_usable(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "vol.img"
    ref = make_file(path, 4 * MiB)

    async def body(vol: Volume) -> None:
        tasks = [asyncio.ensure_future(vol.read(i * 4096, 65536)) for i in range(100)]
        await asyncio.sleep(0)
        for t in tasks[::2]:
            t.cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        for i, res in enumerate(done):
            if not isinstance(res, BaseException):
                assert res == ref[i * 4096 : i * 4096 + 65536]
        assert await vol.read(0, 4096) == ref[:4096]

    with_volume(path, engine, body)


def test_default_engine_per_loop(tmp_path: Path) -> None:
    path = tmp_path / "vol.img"
    make_file(path, 8192)

    async def main() -> Engine:
        a = await open_volume(str(path))
        b = await open_volume(path)
        assert a.engine is b.engine
        assert await a.read(0, 10) == await b.read(0, 10)
        a.close()
        b.close()
        return a.engine

    first = asyncio.run(main())
    second = asyncio.run(main())
    assert first is not second
    assert first.kind == available_backends()[0] or "RESERVOIR_STORAGE_ENGINE" in os.environ


def test_engine_reused_across_loops(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "vol.img"
    ref = make_file(path, 8192)

    async def main() -> bytes:
        vol = await open_volume(str(path), engine=engine)
        try:
            return await vol.read(0, 8192)
        finally:
            vol.close()

    assert asyncio.run(main()) == ref
    assert asyncio.run(main()) == ref


def test_closed_engine(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "vol.img"
    make_file(path, 8192)

    async def main() -> None:
        vol = await open_volume(str(path), engine=engine)
        engine.close()
        with pytest.raises(StorageError) as info:
            await vol.read(0, 10)
        assert info.value.errno == errno.ESHUTDOWN
        vol.close()
        with pytest.raises(StorageError):
            await open_volume(str(path), engine=engine)

    run(main())


def test_uvloop(tmp_path: Path, kind: str) -> None:
    uvloop = pytest.importorskip("uvloop")
    path = tmp_path / "vol.img"
    ref = make_file(path, MiB)

    async def main() -> None:
        eng = open_engine(kind)
        vol = await open_volume(str(path), engine=eng)
        reads = [vol.read(i * 4096, 4096) for i in range(256)]
        for i, data in enumerate(await asyncio.gather(*reads)):
            assert data == ref[i * 4096 : (i + 1) * 4096]
        await vol.write(5, b"uvloop")
        assert await vol.read(0, 16) == ref[:5] + b"uvloop" + ref[11:16]
        vol.close()
        eng.close()

    uvloop.run(main())


def test_mixed_concurrent_requests_through_a_small_depth(tmp_path: Path, kind: str) -> None:
    """Reads, writes and readintos of every size at once, through 4 slots."""
    region = 256 * 1024
    regions = 48
    path = tmp_path / "vol.img"
    ref = make_file(path, region * regions)
    rnd = random.Random(11)

    async def one(vol: Volume, i: int) -> None:
        base = i * region
        offset = base + rnd.randrange(region // 2)
        length = rnd.randrange(1, region // 2)
        choice = i % 3
        if choice == 0:
            data = rnd.randbytes(length)
            ref[offset : offset + length] = data
            await vol.write(offset, data)
            assert await vol.read(offset, length) == data
        elif choice == 1:
            assert await vol.read(offset, length) == ref[offset : offset + length]
        else:
            buf = bytearray(length)
            await vol.readinto(offset, memoryview(buf))
            assert buf == ref[offset : offset + length]

    async def main() -> None:
        engine = open_engine(kind, depth=4)
        vol = await open_volume(str(path), engine=engine)
        try:
            await asyncio.gather(*(one(vol, i) for i in range(regions)))
            await vol.flush()
        finally:
            vol.close()
            engine.close()

    asyncio.run(main())
    assert path.read_bytes() == ref


def test_a_request_failing_after_its_caller_was_cancelled_is_not_logged_as_unretrieved() -> None:
    """A write cancelled with its request still in the kernel waits for it (the buffer is
    the caller's); a failure then (ENOSPC as a copy stops) is no one's news, where
    asyncio logged "Future exception was never retrieved" once for every such write."""

    async def scenario() -> list[dict[str, object]]:
        loop = asyncio.get_running_loop()
        logged: list[dict[str, object]] = []
        loop.set_exception_handler(lambda _, context: logged.append(context))
        request: asyncio.Future[None] = loop.create_future()
        waiter = asyncio.create_task(_until_done(request))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.sleep(0)
        assert not waiter.done()  # held until the request is done
        request.set_exception(OSError(errno.ENOSPC, "No space left on device"))
        with pytest.raises(asyncio.CancelledError):
            await waiter
        del request, waiter
        gc.collect()
        return logged

    assert asyncio.run(scenario()) == []
