"""What tells whether a volume was written while a copy read it.

A copy reads its source extent by extent over seconds or hours; if anything writes
the source meanwhile, the destination holds each extent as it was read, which is not
the source at any one moment. A :class:`ChangeMark` taken before the first read and
again at the end says whether that happened:

- a regular file: its inode, size, and modification and change times (fstat). Every
  write moves them, through any descriptor or mapping, O_DIRECT included; a change
  right after a stat gets a time of its own (the kernel's fine-grained timestamps);
- a block device: the sectors written to it (``/sys/dev/block/MAJ:MIN/stat``; not
  its count of writes, which a flush with no data moves too), which count every
  write that reached the device,
  by any process or file system (a whole disk counts its partitions' writes too), and
  the times of its device node, which a write through the node moves at once. A
  buffered write reaches the counters only when its pages are written back, so the
  device's dirty pages are written back first (fsync: every node of a device shares
  its page cache, so that counts the writes made through another node, whose times
  are not ours); a loop device's backing file is watched as a file besides, since
  writes to the file do not go through the device.

Marks are compared, never interpreted: equal marks mean no change was seen.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

SYS_DEV_BLOCK = Path("/sys/dev/block")
_SECTORS_WRITTEN = 6  # a field of a block device's stat file


@dataclass(frozen=True, slots=True)
class ChangeMark:
    """``how`` the volume is watched (what would move) and its state; ``how`` is
    empty where nothing can tell a change (the mark is then always equal)."""

    how: str
    state: str

    def moved(self, later: ChangeMark) -> bool:
        return bool(self.how) and later != self


def change_mark(fd: int, sys_block: Path = SYS_DEV_BLOCK) -> ChangeMark:
    """The mark of the file or block device open at ``fd``."""
    st = os.fstat(fd)
    if stat.S_ISBLK(st.st_mode):
        _write_back(fd)
        return _device_mark(st, sys_block)
    return ChangeMark("its modification and change times", _file_state(st))


def _write_back(fd: int) -> None:
    """Writes the device's dirty pages back, so its counters count them (EINVAL: a
    descriptor that cannot be synced, which has none)."""
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise


def _file_state(st: os.stat_result) -> str:
    """Not the device number: it may change at a reboot (a resume would then check every
    extent again for nothing); the copy's key already names the file by its path."""
    return f"{st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"


def _device_mark(st: os.stat_result, sys_block: Path) -> ChangeMark:
    node = sys_block / f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    times = f"node {st.st_mtime_ns} {st.st_ctime_ns}"
    try:
        fields = (node / "stat").read_text().split()
        state = f"sectors {fields[_SECTORS_WRITTEN]}; {times}"
    except (OSError, IndexError):
        return ChangeMark("its device node's times", times)  # no statistics here
    how = "its sectors written and its device node's times"
    backing = _backing_file(node)
    if backing is not None:
        how += ", and its backing file's times"
        state += f"; {backing}"
    return ChangeMark(how, state)


def _backing_file(node: Path) -> str | None:
    """The state of a loop device's backing file; None for any other device."""
    try:
        name = (node / "loop" / "backing_file").read_text().strip()
    except OSError:
        return None
    try:
        return _file_state(os.stat(name))
    except OSError:
        return f"{name} (gone)"
