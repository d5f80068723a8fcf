"""The delay line binary: built on demand, and strict about its arguments."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from reservoir.lab import delayline


@pytest.fixture(scope="module")
def dline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (run make install)")
    return delayline.build(tmp_path_factory.mktemp("dline"))


def test_build_is_cached_until_the_source_changes(dline: Path) -> None:
    mtime = dline.stat().st_mtime_ns
    assert delayline.build(dline.parent) == dline
    assert dline.stat().st_mtime_ns == mtime
    old = delayline.SOURCE.stat().st_mtime - 10
    os.utime(dline, (old, old))
    assert delayline.build(dline.parent) == dline
    assert dline.stat().st_mtime > old


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "usage: dline --a IFACE_A --b IFACE_B --delay-ms D"),
        (["--a", "x", "--b", "y"], "usage:"),
        (["--a", "x", "--b", "y", "--delay-ms", "ten"], "--delay-ms must be a number"),
        (["--a", "x", "--b", "y", "--delay-ms", "1", "--loss", "1.5"], "--loss must be a number"),
        (["--a", "x", "--b", "y", "--delay-ms", "1", "extra"], "usage:"),
    ],
)
def test_bad_arguments(dline: Path, args: list[str], message: str) -> None:
    proc = subprocess.run([str(dline), *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_missing_interface(dline: Path) -> None:
    args = ["--a", "nosuchif0", "--b", "nosuchif1", "--delay-ms", "1"]
    proc = subprocess.run([str(dline), *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert "dline: no interface nosuchif0" in proc.stderr
