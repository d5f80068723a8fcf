"""Volume.hash_range: a range read back (O_DIRECT where the volume's I/O is) and fed
to a hasher in a worker thread, for every available backend."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest
from test_storage import MiB, engine, kind, make_file, with_volume

from reservoir.agent.storage import Engine, StorageError, Volume, _read_back

__all__ = ["engine", "kind"]  # fixtures


class Recorder:
    """A hasher that keeps what it was fed, and the threads that fed it."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.threads: set[str] = set()

    def update(self, data: memoryview, /) -> None:
        self.data += data
        self.threads.add(threading.current_thread().name)


@pytest.mark.parametrize(
    "offset,length",
    [(0, 3 * MiB + 123), (1, 3 * MiB), (4096, 2 * MiB), (3 * MiB + 100, 23), (5, 0)],
)
def test_the_range_is_fed_in_order_as_stored(
    tmp_path: Path, engine: Engine, offset: int, length: int
) -> None:
    path = tmp_path / "vol.img"
    ref = make_file(path, 3 * MiB + 123)

    async def body(vol: Volume) -> Recorder:
        got = Recorder()
        await vol.hash_range(offset, length, got)
        return got

    got = with_volume(path, engine, body)
    assert got.data == ref[offset : offset + length]
    assert threading.current_thread().name not in got.threads  # off the event loop


def test_holes_read_as_zeros(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "vol.img"
    with open(path, "wb") as f:
        f.truncate(4 * MiB)
        f.seek(MiB)
        f.write(b"x" * 4096)

    async def body(vol: Volume) -> Recorder:
        got = Recorder()
        await vol.hash_range(0, 4 * MiB, got)
        return got

    expected = bytearray(4 * MiB)
    expected[MiB : MiB + 4096] = b"x" * 4096
    assert with_volume(path, engine, body).data == expected


def _reads_by_fd(monkeypatch: pytest.MonkeyPatch, refused: set[int]) -> list[int]:
    """The descriptors os.preadv reads, in order; reads of ``refused`` fail EINVAL."""
    preadv = os.preadv
    fds: list[int] = []

    def recording(fd: int, buffers: list[memoryview], offset: int) -> int:
        fds.append(fd)
        if fd in refused:
            raise OSError(errno.EINVAL, "Invalid argument")
        return preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", recording)
    return fds


def test_a_direct_volume_is_read_back_o_direct(
    tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "vol.img"
    ref = make_file(path, 2 * MiB)
    fds = _reads_by_fd(monkeypatch, set())

    async def body(vol: Volume) -> tuple[Recorder, int]:
        got = Recorder()
        await vol.hash_range(4096, MiB, got)
        return got, vol._h.dfd

    got, dfd = with_volume(path, engine, body)
    if dfd < 0:
        pytest.skip("no O_DIRECT here (threads engine, or a filesystem that refuses it)")
    assert got.data == ref[4096 : 4096 + MiB]
    assert set(fds) == {dfd}


def test_direct_read_back_reads_larger_chunks_than_buffered_read_back(
    tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The device serves 4 MiB reads faster; the page cache's are hashed in cache."""
    path = tmp_path / "vol.img"
    ref = make_file(path, 8 * MiB)
    fds = _reads_by_fd(monkeypatch, set())
    got, dfd, _ = with_volume(path, engine, lambda vol: _hash_all(vol, 8 * MiB))
    if dfd < 0:
        pytest.skip("no O_DIRECT here (threads engine, or a filesystem that refuses it)")
    assert got.data == ref
    assert fds == [dfd] * (8 * MiB // _read_back.DIRECT_CHUNK)
    fds.clear()
    got, _, fd = with_volume(path, engine, lambda vol: _hash_all(vol, 8 * MiB), direct=False)
    assert got.data == ref
    assert fds == [fd] * (8 * MiB // _read_back.CHUNK)


async def _hash_all(vol: Volume, length: int) -> tuple[Recorder, int, int]:
    """What hashing the first ``length`` bytes fed the hasher, and the volume's direct
    and buffered descriptors (read before it closes)."""
    got = Recorder()
    await vol.hash_range(0, length, got)
    return got, vol._h.dfd, vol._h.fd


def test_a_page_cache_volume_is_read_back_through_the_page_cache(
    tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its writes are there (an O_DIRECT read would wait for their writeback first)."""
    path = tmp_path / "vol.img"
    make_file(path, 2 * MiB)
    fds = _reads_by_fd(monkeypatch, set())

    async def body(vol: Volume) -> tuple[Recorder, int]:
        await vol.write(4096, b"new" * 4096)
        got = Recorder()
        await vol.hash_range(4096, 3 * 4096, got)
        return got, vol._h.fd

    got, fd = with_volume(path, engine, body, direct=False)
    assert got.data == b"new" * 4096
    assert set(fds) == {fd}


def test_a_direct_read_refused_with_einval_is_done_buffered(
    tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "vol.img"
    ref = make_file(path, 2 * MiB)
    refused: set[int] = set()
    fds = _reads_by_fd(monkeypatch, refused)

    async def body(vol: Volume) -> tuple[Recorder, int, int]:
        refused.add(vol._h.dfd)
        got = Recorder()
        await vol.hash_range(0, 2 * MiB, got)
        return got, vol._h.dfd, vol._h.fd

    got, dfd, fd = with_volume(path, engine, body)
    if dfd < 0:
        pytest.skip("no O_DIRECT here (threads engine, or a filesystem that refuses it)")
    assert got.data == ref
    assert fds[0] == dfd and set(fds[1:]) == {fd}


def test_a_range_past_the_end_is_refused_and_a_shrunk_file_is_eio(
    tmp_path: Path, engine: Engine
) -> None:
    path = tmp_path / "vol.img"
    make_file(path, 2 * MiB)

    async def body(vol: Volume) -> None:
        with pytest.raises(StorageError) as info:
            await vol.hash_range(MiB, MiB + 1, Recorder())
        assert info.value.errno == errno.EINVAL
        os.truncate(path, MiB)
        with pytest.raises(StorageError) as info:
            await vol.hash_range(0, 2 * MiB, Recorder())
        assert info.value.errno == errno.EIO

    with_volume(path, engine, body)
