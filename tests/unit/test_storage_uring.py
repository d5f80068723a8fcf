"""The _uring extension and the io_uring backend's own behaviour."""

from __future__ import annotations

import asyncio
import errno
import mmap
import os
import random
import select
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reservoir.agent.storage import BULK_WRITE, StorageError, open_volume
from reservoir.agent.storage import _engine as engine_mod
from reservoir.agent.storage._base import Handle

if engine_mod.uring_unavailable() is not None:
    pytest.skip(f"io_uring: {engine_mod.uring_unavailable()}", allow_module_level=True)

from reservoir.agent.storage import _uring
from reservoir.agent.storage._uring_engine import UringEngine
from reservoir.agent.storage._volume import _pread_nowait_py

MiB = 1 << 20


@pytest.fixture
def data_file(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    content = random.Random(1).randbytes(MiB)
    path = tmp_path / "data.img"
    path.write_bytes(content)
    fd = os.open(path, os.O_RDWR)
    try:
        yield fd, content
    finally:
        os.close(fd)


def wait_all(ring: _uring.Ring[str], count: int) -> list[tuple[str, int, bytes | None]]:
    """Submits and collects count completions, waiting on the eventfd."""
    ring.submit()
    out: list[tuple[str, int, bytes | None]] = []
    while len(out) < count:
        select.select([ring.fileno()], [], [], 5)
        out += ring.reap()
    return out


def test_ring_attributes() -> None:
    ring: _uring.Ring[str] = _uring.Ring(8, 8192)
    assert (ring.entries, ring.bufsize, ring.inflight) == (8, 8192, 0)
    assert ring.fixed in (True, False)
    assert ring.fileno() >= 0
    assert ring.reap() == []
    assert ring.close() == []
    assert ring.closed
    with pytest.raises(ValueError, match="closed"):
        ring.submit()
    assert ring.close() == []


@pytest.mark.parametrize(("entries", "bufsize"), [(0, 4096), (5000, 4096), (4, 1000), (4, 0)])
def test_ring_rejects_bad_sizes(entries: int, bufsize: int) -> None:
    with pytest.raises(ValueError):
        _uring.Ring(entries, bufsize)


def test_a_ring_that_never_initialised_closes_no_descriptor() -> None:
    """Dropping a Ring whose __init__ raised, or never ran, leaves fd 0 alone.

    It once closed its eventfd field still zero from allocation, i.e. stdin; the next
    descriptor opened became fd 0, and uvloop aborts closing a loop whose epoll fd is 0.
    """
    saved = os.dup(0)
    try:
        with pytest.raises(ValueError):
            _uring.Ring(0, 4096)
        with pytest.raises(TypeError):
            _uring.Ring("many")  # type: ignore[arg-type]
        _uring.Ring.__new__(_uring.Ring)  # deallocated at once, uninitialised
        os.fstat(0)  # OSError EBADF if one of them closed it
    finally:
        os.dup2(saved, 0)
        os.close(saved)


def test_ring_read_write(data_file: tuple[int, bytes]) -> None:
    fd, content = data_file
    ring: _uring.Ring[str] = _uring.Ring(8, 8192)
    dest = bytearray(100)
    ring.read(fd, 10, 4096, "bytes")
    ring.read(fd, 5000, 100, "into", dest)
    assert ring.inflight == 2
    done = sorted(wait_all(ring, 2))
    assert done == [("bytes", 4096, content[10:4106]), ("into", 100, None)]
    assert dest == content[5000:5100]
    ring.write(fd, 0, b"hello", "w")
    assert wait_all(ring, 1) == [("w", 5, None)]
    ring.fsync(fd, "sync")
    ring.fallocate(0, fd, 0, 4096, "falloc")
    ring.sync_file_range(fd, 0, 4096, 2, "writeback")  # SYNC_FILE_RANGE_WRITE
    assert sorted(wait_all(ring, 3)) == [
        ("falloc", 0, None),
        ("sync", 0, None),
        ("writeback", 0, None),
    ]
    ring.read(fd, 0, 5, "again")
    assert ring.close() == [("again", 5, b"hello")]


def test_ring_write_in_place_writes_from_the_buffer_it_holds_until_reaped(
    data_file: tuple[int, bytes],
) -> None:
    fd, _ = data_file
    ring: _uring.Ring[str] = _uring.Ring(4, 4096)
    data = bytearray(b"in place" * 1024)  # longer than a slot buffer: no copy into one
    assert ring.write_in_place(fd, 100, data, "w", 1)
    with pytest.raises(BufferError):
        data.append(0)  # held by the ring: cannot be resized (or freed) under the kernel
    assert wait_all(ring, 1) == [("w", len(data), None)]
    data.append(0)  # reaped: let go
    assert os.pread(fd, 8192, 100) == b"in place" * 1024
    ring.close()


def test_ring_write_in_place_refuses_memory_not_aligned_as_asked(
    data_file: tuple[int, bytes],
) -> None:
    fd, _ = data_file
    ring: _uring.Ring[str] = _uring.Ring(4, 4096)
    unaligned = memoryview(mmap.mmap(-1, 8192))[1:4097]
    assert not ring.write_in_place(fd, 0, unaligned, "w", 4096)
    assert ring.inflight == 0
    with pytest.raises(ValueError, match="power of two"):
        ring.write_in_place(fd, 0, unaligned, "w", 3)
    ring.close()


def test_ring_writes_from_its_registered_arena_without_a_slot_buffer(
    data_file: tuple[int, bytes],
) -> None:
    fd, _ = data_file
    ring: _uring.Ring[str] = _uring.Ring(4, 4096, MiB)
    assert ring.fixed and ring.arena_fixed
    arena = memoryview(ring)
    assert len(arena) == MiB and not arena.readonly
    part = arena[8192 : 8192 + 65536]  # longer than a slot buffer: no copy into one
    part[:] = b"arena!!!" * 8192
    assert ring.registered(part) and not ring.registered(bytearray(16))
    assert ring.write_registered(fd, 4096, part, "w")
    assert wait_all(ring, 1) == [("w", 65536, None)]
    assert os.pread(fd, 65536, 4096) == b"arena!!!" * 8192
    assert not ring.write_registered(fd, 0, bytearray(4096), "not")  # not in the arena
    assert ring.inflight == 0
    ring.close()
    del part, arena


def test_a_ring_without_an_arena_exports_none_and_refuses_odd_sizes() -> None:
    ring: _uring.Ring[str] = _uring.Ring(4, 4096)
    with pytest.raises(BufferError, match="no arena"):
        memoryview(ring)
    assert not ring.arena_fixed and not ring.registered(bytearray(4096))
    ring.close()
    with pytest.raises(ValueError, match="arena must be a multiple of 4096"):
        _uring.Ring(4, 4096, 1000)


def test_an_engine_writes_a_volume_from_its_arena(tmp_path: Path) -> None:
    async def main() -> bytes:
        engine = UringEngine(8, arena=4 * MiB)
        arena = engine.arena()
        assert arena is not None
        arena[:MiB] = random.Random(3).randbytes(MiB)
        path = tmp_path / "v.img"
        path.write_bytes(bytes(2 * MiB))
        volume = await open_volume(path, engine=engine, direct=False)
        try:
            await volume.write(MiB, arena[:MiB])
        finally:
            volume.close()
            engine.close()
        return path.read_bytes()[MiB:]

    assert asyncio.run(main()) == random.Random(3).randbytes(MiB)


def test_ring_errors_are_completions(data_file: tuple[int, bytes]) -> None:
    fd, _ = data_file
    ring: _uring.Ring[str] = _uring.Ring(4, 4096)
    ring.read(-1, 0, 10, "badfd")
    ring.read(fd, 2 * MiB, 10, "eof")
    ring.sync_file_range(fd, 0, 4096, 0xFF, "badflags")
    assert sorted(wait_all(ring, 3)) == [
        ("badfd", -errno.EBADF, None),
        ("badflags", -errno.EINVAL, None),
        ("eof", 0, None),
    ]
    ring.close()


def test_ring_argument_checks(data_file: tuple[int, bytes]) -> None:
    fd, _ = data_file
    ring: _uring.Ring[str] = _uring.Ring(2, 4096)
    with pytest.raises(ValueError):
        ring.read(fd, 0, 4097, "too long")
    with pytest.raises(ValueError):
        ring.read(fd, -1, 10, "negative")
    with pytest.raises(ValueError):
        ring.read(fd, 0, 10, "short dest", bytearray(5))
    with pytest.raises(ValueError):
        ring.write(fd, 0, bytes(4097), "too long")
    with pytest.raises(ValueError):
        ring.sync_file_range(fd, 0, -1, 2, "negative length")
    with pytest.raises(TypeError):
        ring.read(fd, 0)  # type: ignore[call-arg]
    with pytest.raises(BufferError):
        ring.read(fd, 0, 10, "read-only dest", b"0123456789")
    assert ring.inflight == 0
    ring.close()


def test_ring_full_raises_oserror_naming_the_syscall(data_file: tuple[int, bytes]) -> None:
    fd, _ = data_file
    ring: _uring.Ring[str] = _uring.Ring(2, 4096)
    ring.read(fd, 0, 10, "a")
    ring.read(fd, 0, 10, "b")
    with pytest.raises(OSError) as info:
        ring.read(fd, 0, 10, "c")
    assert info.value.errno == errno.EBUSY
    assert "(originated from io_uring_get_sqe)" in str(info.value)
    assert len(ring.close()) == 2


def test_probe() -> None:
    _uring.probe()


def run_engine(path: Path, engine: UringEngine, reads: int) -> list[bytes | BaseException]:
    async def main() -> list[bytes | BaseException]:
        vol = await open_volume(str(path), engine=engine)
        try:
            tasks = [vol.read((i * 4096) % MiB, 4096) for i in range(reads)]
            return await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            vol.close()

    return asyncio.run(main())


@pytest.mark.parametrize("mode", ["batch", "immediate", "adaptive"])
def test_submit_modes_and_backlog(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "vol.img"
    content = random.Random(2).randbytes(MiB)
    path.write_bytes(content)
    engine = UringEngine(4, submit=mode)  # 300 requests through 4 slots
    try:
        results = run_engine(path, engine, 300)
    finally:
        engine.close()
    for i, data in enumerate(results):
        assert data == content[(i * 4096) % MiB :][:4096]


def test_bad_submit_mode() -> None:
    with pytest.raises(ValueError):
        UringEngine(4, submit="sometimes")


def test_close_with_requests_in_flight_and_queued(tmp_path: Path) -> None:
    path = tmp_path / "vol.img"
    content = random.Random(3).randbytes(MiB)
    path.write_bytes(content)
    engine = UringEngine(4)

    async def main() -> list[bytes | BaseException]:
        vol = await open_volume(str(path), engine=engine)
        tasks = [asyncio.ensure_future(vol.read(i * 4096, 4096)) for i in range(50)]
        await asyncio.sleep(0)  # all started: 4 prepared, 46 queued
        engine.close()
        vol.close()
        return await asyncio.gather(*tasks, return_exceptions=True)

    results = asyncio.run(main())
    done = [r for r in results if isinstance(r, bytes)]
    failed = [r for r in results if isinstance(r, StorageError)]
    assert len(done) + len(failed) == 50
    assert all(e.errno == errno.ESHUTDOWN for e in failed)
    assert len(done) >= 4
    for i, r in enumerate(results):
        if isinstance(r, bytes):
            assert r == content[i * 4096 : (i + 1) * 4096]


def test_direct_io_used_where_possible(tmp_path: Path) -> None:
    path = tmp_path / "vol.img"
    path.write_bytes(bytes(MiB))

    async def main() -> None:
        engine = UringEngine(8)
        vol = await open_volume(str(path), engine=engine)
        buffered = await open_volume(str(path), engine=engine, direct=False)
        try:
            assert not buffered.direct
            if not vol.direct:
                pytest.skip("the filesystem of the temporary directory refuses O_DIRECT")
            # aligned (direct) writes are seen by buffered reads and back
            await vol.write(8192, b"d" * 4096)
            assert await buffered.read(8190, 4100) == b"\0\0" + b"d" * 4096 + b"\0\0"
            await buffered.write(8192 + 100, b"b" * 10)
            assert (await vol.read(8192, 4096))[95:115] == b"d" * 5 + b"b" * 10 + b"d" * 5
        finally:
            vol.close()
            buffered.close()
            engine.close()

    asyncio.run(main())


def _cached(path: Path, offset: int, length: int) -> bool:
    """Whether the page cache holds the whole range (a read that may not wait)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.preadv(fd, [bytearray(length)], offset, os.RWF_NOWAIT) == length
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_bulk_writes_bypass_the_page_cache_and_the_rest_does_not(tmp_path: Path) -> None:
    """Under "bulk-writes" an aligned write of BULK_WRITE bytes or more reaches storage
    without a page-cache copy; small writes and every read go through the cache, and
    each sees the others' data."""
    path = tmp_path / "vol.img"
    path.write_bytes(bytes(4 * MiB))
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # nothing of it cached at first
    os.close(fd)
    bulk = random.Random(5).randbytes(MiB)

    async def main() -> None:
        engine = UringEngine(8, arena=MiB)
        vol = await open_volume(str(path), engine=engine, direct="bulk-writes")
        try:
            if not vol.direct:
                pytest.skip("the filesystem of the temporary directory refuses O_DIRECT")
            assert not vol.direct_reads
            arena = engine.arena()
            assert arena is not None
            arena[:MiB] = bulk
            await vol.write(MiB, arena[:MiB])  # from registered memory, as the target does
            await vol.write(3 * MiB, b"s" * 4096)
            assert not _cached(path, MiB, MiB)
            assert _cached(path, 3 * MiB, 4096)
            assert await vol.read(MiB - 2, MiB + 4) == b"\0\0" + bulk + b"\0\0"
            assert _cached(path, MiB, MiB)  # reads fill the cache
            await vol.write(MiB + 4096, b"x" * 100)  # a small write over a bulk one
            assert await vol.read(MiB + 4096, 101) == b"x" * 100 + bulk[4196:4197]
            await vol.write(2 * MiB, bytes(BULK_WRITE - 4096))  # under the bulk size
            assert _cached(path, 2 * MiB, BULK_WRITE - 4096)
        finally:
            vol.close()
            engine.close()

    asyncio.run(main())


def test_direct_einval_falls_back_to_buffered(tmp_path: Path) -> None:
    path = tmp_path / "vol.img"
    content = random.Random(4).randbytes(64 * 1024)
    path.write_bytes(content)

    async def main() -> None:
        engine = UringEngine(8)
        vol = await open_volume(str(path), engine=engine)
        try:
            if not vol.direct:
                pytest.skip("the filesystem of the temporary directory refuses O_DIRECT")
            vol._h.dmask = 0  # pretend any alignment will do: the kernel says EINVAL
            assert await vol.read(1, 3) == content[1:4]
            assert vol._h.dmask == 4095
            assert vol.direct
            await vol.write(5, b"abc")
            assert await vol.read(4, 5) == content[4:5] + b"abc" + content[8:9]
        finally:
            vol.close()
            engine.close()

    asyncio.run(main())


def test_direct_writes_from_unaligned_memory_go_through_slot_buffers(tmp_path: Path) -> None:
    path = tmp_path / "vol.img"
    path.write_bytes(bytes(2 * MiB))
    content = random.Random(5).randbytes(MiB + 1)

    async def main() -> None:
        engine = UringEngine(8)
        vol = await open_volume(str(path), engine=engine)
        try:
            if not vol.direct:
                pytest.skip("the filesystem of the temporary directory refuses O_DIRECT")
            await vol.write(4096, memoryview(content)[1:])  # aligned range, odd address
            assert await vol.read(4096, MiB) == content[1:]
        finally:
            vol.close()
            engine.close()

    asyncio.run(main())


class RingCalls:
    """The engine's ring, its write and write_in_place calls counted on the way."""

    def __init__(self, ring: _uring.Ring[Any]) -> None:
        self.ring = ring
        self.calls: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.ring, name)

    def write(self, fd: int, offset: int, data: memoryview, user: object) -> None:
        self.calls.append(("write", len(data)))
        self.ring.write(fd, offset, data, user)

    def write_in_place(
        self, fd: int, offset: int, data: memoryview, user: object, align: int
    ) -> bool:
        self.calls.append(("in place", len(data)))
        return self.ring.write_in_place(fd, offset, data, user, align)


def test_buffered_writes_go_through_slot_buffers_and_direct_ones_in_place(
    tmp_path: Path,
) -> None:
    """The kernel copies a registered slot buffer into the page cache faster than the
    caller's memory; an O_DIRECT write copies nothing."""
    path = tmp_path / "vol.img"
    path.write_bytes(bytes(4 * MiB))
    data = memoryview(mmap.mmap(-1, 2 * MiB))  # page aligned
    data[:] = b"d" * (2 * MiB)

    async def main() -> tuple[list[tuple[str, int]], list[tuple[str, int]], bool]:
        engine = UringEngine(8)
        calls = RingCalls(engine._ring)
        engine._ring = calls  # type: ignore[assignment]
        direct = await open_volume(str(path), engine=engine)
        buffered = await open_volume(str(path), engine=engine, direct=False)
        try:
            await buffered.write(0, data)
            through_slots, calls.calls = calls.calls, []
            await direct.write(2 * MiB, data)
            return through_slots, calls.calls, direct.direct
        finally:
            direct.close()
            buffered.close()
            engine.close()

    through_slots, in_place, is_direct = asyncio.run(main())
    assert through_slots == [("write", 128 << 10)] * 16
    if not is_direct:
        pytest.skip("the filesystem of the temporary directory refuses O_DIRECT")
    assert in_place == [("in place", MiB)] * 2
    assert path.read_bytes() == b"d" * (4 * MiB)


def test_a_cancelled_write_returns_only_once_storage_is_done_with_its_data(
    tmp_path: Path,
) -> None:
    path = tmp_path / "vol.img"
    path.write_bytes(bytes(4 * MiB))

    async def main() -> None:
        engine = UringEngine(2)  # a backlog: most of the write waits for the ring
        vol = await open_volume(str(path), engine=engine, direct=False)
        data = bytearray(b"w" * (4 * MiB))
        try:
            write = asyncio.ensure_future(vol.write(0, data))
            await asyncio.sleep(0)
            write.cancel()
            with pytest.raises(asyncio.CancelledError):
                await write
            assert engine._inflight == 0 and not engine._backlog
            data[:] = bytes(len(data))  # the caller reuses its buffer: nothing is written
            assert await vol.read(0, 4 * MiB) == b"w" * (4 * MiB)
        finally:
            vol.close()
            engine.close()

    asyncio.run(main())


def test_handle_direct_refused_gives_up_after_4k() -> None:
    h = Handle(-1, -1, 512)
    h.direct_refused(511)
    assert h.dmask == 4095
    h.direct_refused(511)  # stale: another request already tightened it
    assert h.dmask == 4095
    h.dfd = 7
    h.direct_refused(4095)
    assert h.dfd == -1


def test_fixed_buffers_registered() -> None:
    engine = UringEngine(8)
    try:
        assert engine.fixed_buffers  # root may lock the 1 MiB pool
    finally:
        engine.close()


def test_runtime_refusal_selects_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """io_uring_setup failing (EPERM: io_uring_disabled, seccomp) means threads."""

    def refuse() -> None:
        raise OSError(errno.EPERM, "Operation not permitted (originated from io_uring_setup)")

    monkeypatch.setattr(_uring, "probe", refuse)
    monkeypatch.delenv("RESERVOIR_STORAGE_ENGINE", raising=False)
    engine_mod.uring_unavailable.cache_clear()
    try:
        assert "Operation not permitted" in (engine_mod.uring_unavailable() or "")
        assert engine_mod.available_backends() == ["threads"]
        engine = engine_mod.open_engine()
        assert engine.kind == "threads"
        engine.close()
    finally:
        monkeypatch.undo()
        engine_mod.uring_unavailable.cache_clear()
    assert engine_mod.available_backends() == ["io_uring", "threads"]


def test_pread_nowait_copies_a_cached_range_once_or_says_none(
    data_file: tuple[int, bytes],
) -> None:
    fd, content = data_file
    os.pread(fd, len(content), 0)  # in the page cache now
    got = _uring.pread_nowait(fd, 4096, 65536)
    assert type(got) is bytes and got == content[4096 : 4096 + 65536]
    assert _uring.pread_nowait(fd, len(content) - 10, 100) is None  # short: past the end
    assert _pread_nowait_py(fd, 4096, 65536) == got  # the fallback agrees


def test_pread_nowait_errors(data_file: tuple[int, bytes]) -> None:
    fd, _ = data_file
    with pytest.raises(OSError) as caught:
        _uring.pread_nowait(-1, 0, 10)
    assert caught.value.errno == errno.EBADF
    with pytest.raises(ValueError):
        _uring.pread_nowait(fd, 0, 0)
