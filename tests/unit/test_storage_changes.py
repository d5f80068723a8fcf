"""ChangeMark: what tells whether a copy's source was written while it was read."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.agent.storage._changes import ChangeMark, change_mark
from reservoir.lab import loopdev


def mark_of(path: Path) -> ChangeMark:
    fd = os.open(path, os.O_RDONLY)
    try:
        return change_mark(fd)
    finally:
        os.close(fd)


@pytest.fixture
def file(tmp_path: Path) -> Path:
    path = tmp_path / "volume.img"
    path.write_bytes(bytes(range(256)) * 64)
    return path


def test_a_file_read_keeps_its_mark(file: Path) -> None:
    before = mark_of(file)
    assert file.read_bytes()
    assert not before.moved(mark_of(file))


def test_a_file_written_in_place_moves_its_mark_even_with_the_same_bytes(file: Path) -> None:
    before = mark_of(file)
    with open(file, "r+b") as f:
        f.write(file.read_bytes()[:16])  # what was there already
    after = mark_of(file)
    assert before.moved(after)
    assert before.how == "its modification and change times"


def test_a_file_cut_short_or_replaced_moves_its_mark(file: Path, tmp_path: Path) -> None:
    before = mark_of(file)
    os.truncate(file, 100)
    assert before.moved(mark_of(file))
    again = mark_of(file)
    other = tmp_path / "other.img"
    other.write_bytes(file.read_bytes())
    os.replace(other, file)  # another inode under the same name
    assert again.moved(mark_of(file))


def fake_device(tmp_path: Path, rdev: int, stat_line: str, backing: str | None = None) -> Path:
    """A /sys/dev/block of one device ``rdev`` whose stat file says ``stat_line``."""
    node = tmp_path / "sys" / f"{os.major(rdev)}:{os.minor(rdev)}"
    node.mkdir(parents=True)
    (node / "stat").write_text(stat_line)
    if backing is not None:
        (node / "loop").mkdir()
        (node / "loop" / "backing_file").write_text(backing + "\n")
    return tmp_path / "sys"


STAT = "  100 0 800 5 {writes} 0 {sectors} 9 0 14 14 0 0 0 0 0 0\n"


def block_mark(
    monkeypatch: pytest.MonkeyPatch, sys_block: Path, rdev: int, node_time: int = 1
) -> ChangeMark:
    """The mark of a block device ``rdev`` whose node was last changed at ``node_time``
    (fstat answering for it)."""
    fields = list(os.fstat(0))
    fields[stat.ST_MODE] = stat.S_IFBLK | 0o600
    extra = {"st_rdev": rdev, "st_mtime_ns": node_time, "st_ctime_ns": node_time}
    faked = os.stat_result(fields, extra)
    monkeypatch.setattr(os, "fstat", lambda fd: faked)
    return change_mark(0, sys_block)


def test_a_block_device_is_watched_by_its_write_counters_and_its_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rdev = os.makedev(8, 16)
    sys_block = fake_device(tmp_path, rdev, STAT.format(writes=7, sectors=56))
    before = block_mark(monkeypatch, sys_block, rdev)
    assert before.how == "its sectors written and its device node's times"
    assert not before.moved(block_mark(monkeypatch, sys_block, rdev))
    assert before.moved(block_mark(monkeypatch, sys_block, rdev, node_time=2))
    (sys_block / "8:16" / "stat").write_text(STAT.format(writes=8, sectors=64))
    assert before.moved(block_mark(monkeypatch, sys_block, rdev))


def test_a_loop_device_is_watched_by_its_backing_file_too(
    tmp_path: Path, file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes to a loop device's backing file do not go through the device."""
    rdev = os.makedev(7, 3)
    sys_block = fake_device(tmp_path, rdev, STAT.format(writes=0, sectors=0), str(file))
    before = block_mark(monkeypatch, sys_block, rdev)
    assert before.how.endswith(", and its backing file's times")
    with open(file, "r+b") as f:
        f.write(b"x")
    assert before.moved(block_mark(monkeypatch, sys_block, rdev))


def test_a_device_without_statistics_is_watched_by_its_node_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rdev = os.makedev(250, 0)
    mark = block_mark(monkeypatch, tmp_path / "nothing-here", rdev)
    assert mark.how == "its device node's times"
    assert not mark.moved(block_mark(monkeypatch, tmp_path / "nothing-here", rdev))
    assert mark.moved(block_mark(monkeypatch, tmp_path / "nothing-here", rdev, node_time=5))


def test_a_mark_that_cannot_tell_never_moves() -> None:
    assert not ChangeMark("", "").moved(ChangeMark("its sectors written", "sectors 1"))


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    image = tmp_path / "backing.img"
    image.write_bytes(bytes(1 << 20))
    try:
        with loopdev.loop_device(image) as dev:
            yield dev, image
    except loopdev.LoopUnavailable as exc:
        pytest.skip(str(exc))


def test_a_real_loop_device_moves_for_a_buffered_write_and_a_write_to_its_file(
    loop: tuple[str, Path],
) -> None:
    """A buffered write through the device reaches its counters only at writeback:
    the node's times move at once. A write to the backing file bypasses the device."""
    dev, image = loop
    before = mark_of(Path(dev))
    with open(dev, "rb") as f:
        assert f.read(4096) == bytes(4096)
    assert not before.moved(mark_of(Path(dev)))
    fd = os.open(dev, os.O_WRONLY)
    try:
        os.pwrite(fd, b"written", 0)
        assert before.moved(mark_of(Path(dev)))  # before any writeback
    finally:
        os.close(fd)
    again = mark_of(Path(dev))
    with open(image, "r+b") as f:
        f.seek(4096)
        f.write(b"behind the device")
    assert again.moved(mark_of(Path(dev)))


def test_a_buffered_write_through_another_node_of_the_device_moves_its_mark(
    loop: tuple[str, Path], tmp_path: Path
) -> None:
    """A second node of the same device (mknod): its writes move neither our node's
    times nor, until writeback, the device's counters; the mark writes the device's
    dirty pages back first, so they are counted."""
    dev, _ = loop
    other = tmp_path / "same-device"
    os.mknod(other, stat.S_IFBLK | 0o600, os.stat(dev).st_rdev)
    before = mark_of(Path(dev))
    fd = os.open(other, os.O_WRONLY)
    try:
        os.pwrite(fd, b"through another node", 8192)  # buffered: not written back yet
        assert before.moved(mark_of(Path(dev)))
    finally:
        os.close(fd)
