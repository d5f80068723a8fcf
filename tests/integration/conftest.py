"""Fixtures that start real processes: our target (and tgtd for comparisons)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.lab.peers import ReservoirTarget

LUN_SIZE = 64 << 20
IQN = "iqn.2026-11.org.reservoir:itest"
ALLOWED = "iqn.2026-11.org.reservoir:test-client"
CHAP = ("client-user", "client-secret-16")
MUTUAL = ("target-user", "target-secret-16")


def need_tool(name: str) -> None:
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed (run make install)")


@pytest.fixture
def lun_file(tmp_path: Path) -> Path:
    path = tmp_path / "lun0.img"
    with open(path, "wb") as f:
        f.truncate(LUN_SIZE)
    return path


def _serve(
    tmp_path: Path, luns: list[Path], extra: list[str], name: str, *, open_access: bool = False
) -> Iterator[ReservoirTarget]:
    log = tmp_path / f"{name}.log"
    with ReservoirTarget(
        luns, iqn=IQN, log_path=log, extra=extra, open_access=open_access
    ) as target:
        yield target
        alive = target.alive()
    if not alive:
        pytest.fail(f"the target died during the test; log:\n{log.read_text()[-4000:]}")


@pytest.fixture
def target(tmp_path: Path, lun_file: Path) -> Iterator[ReservoirTarget]:
    """Our target with one 64 MiB file LUN, open to every initiator."""
    yield from _serve(tmp_path, [lun_file], ["--nop-interval", "0"], "target", open_access=True)


@pytest.fixture
def chap_target(tmp_path: Path, lun_file: Path) -> Iterator[ReservoirTarget]:
    """Our target with one-way and mutual CHAP and an ACL of one initiator."""
    extra = ["--chap", ":".join(CHAP), "--mutual-chap", ":".join(MUTUAL), "--allow", ALLOWED]
    yield from _serve(tmp_path, [lun_file], extra, "chap-target")
