"""Volume.hash_range: a range read back from storage (O_DIRECT where the volume allows
it) and fed to a hasher in a worker thread, for every available backend."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest
from test_storage import MiB, engine, kind, make_file, with_volume

from reservoir.agent.storage import Engine, StorageError, Volume, _sys

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


def test_buffered_writes_are_read_back_from_storage_o_direct(
    tmp_path: Path, engine: Engine
) -> None:
    """The volume's I/O is buffered; reading back goes O_DIRECT all the same (the kernel
    writes the dirty pages of the range back first)."""
    path = tmp_path / "vol.img"
    make_file(path, 2 * MiB)

    async def body(vol: Volume) -> tuple[Recorder, int]:
        await vol.write(4096, b"new" * 4096)
        got = Recorder()
        await vol.hash_range(4096, 3 * 4096, got)
        return got, vol._h.rfd

    got, rfd = with_volume(path, engine, body, direct=False)
    if rfd < 0:
        pytest.skip("the filesystem of the temporary directory refuses O_DIRECT")
    assert got.data == b"new" * 4096


def test_without_o_direct_the_range_is_read_buffered(
    tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on tmpfs, which refuses O_DIRECT."""
    monkeypatch.setattr(_sys, "_open_direct", lambda path, flags: -1)
    path = tmp_path / "vol.img"
    ref = make_file(path, MiB + 7)

    async def body(vol: Volume) -> Recorder:
        assert vol._h.rfd == -1
        got = Recorder()
        await vol.hash_range(3, MiB + 4, got)
        return got

    assert with_volume(path, engine, body).data == ref[3:]


def test_a_direct_read_refused_with_einval_is_done_buffered(
    tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "vol.img"
    ref = make_file(path, 2 * MiB)
    preadv = os.preadv
    direct: set[int] = set()

    def refusing(fd: int, buffers: list[memoryview], offset: int) -> int:
        if fd in direct:
            raise OSError(errno.EINVAL, "Invalid argument")
        return preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", refusing)  # only reads of the O_DIRECT descriptor

    async def body(vol: Volume) -> Recorder:
        direct.add(vol._h.rfd)
        got = Recorder()
        await vol.hash_range(0, 2 * MiB, got)
        return got

    assert with_volume(path, engine, body).data == ref


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
