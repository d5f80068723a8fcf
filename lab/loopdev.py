"""Loop devices over image files, for tests that need a real block device.

    with loop_device(image, sector_size=4096) as dev:   # "/dev/loopN"
        ...

The device is always detached on the way out.  Where loop devices cannot be
used (no losetup, no permission, no free device) :class:`LoopUnavailable`
says why, so a test can skip with that reason.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from reservoir.lab.errors import LabError


class LoopUnavailable(LabError):  # noqa: N818 - reads as a condition, like FileNotFound
    """Loop devices cannot be used on this machine; the message says why."""


def attach(image: Path, sector_size: int = 512) -> str:
    if shutil.which("losetup") is None:
        raise LoopUnavailable("losetup is not installed")
    cmd = ["losetup", "--find", "--show", "--sector-size", str(sector_size), str(image)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LoopUnavailable(f"losetup failed to run: {exc}") from exc
    if proc.returncode != 0:
        raise LoopUnavailable(
            f"losetup not permitted here: {proc.stderr.strip() or proc.returncode}"
        )
    return proc.stdout.strip()


def detach(device: str) -> None:
    subprocess.run(["losetup", "--detach", device], capture_output=True, timeout=30, check=False)


@contextmanager
def loop_device(image: Path, sector_size: int = 512) -> Iterator[str]:
    device = attach(image, sector_size)
    try:
        yield device
    finally:
        detach(device)
