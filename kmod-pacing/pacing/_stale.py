"""What a killed agent's cwnd clamp leaves behind, found and removed.

:class:`~reservoir.pacing._bpf.ClampProgram` undoes its setup on close, but a process
killed with SIGKILL leaves: its cgroup ``reservoir-cwnd-<pid>-<token>`` (the program
still attached to it), its pins in a bpffs (``reservoir-<pid>-<token>`` in a mounted
one, or a private bpffs mounted at ``/run/reservoir/bpffs-<pid>-<token>``) and a
private cgroup2 mount ``/run/reservoir/cgroup2-<pid>-<token>``.  Everything is named
after its owner's PID: only what belongs to a PID that no longer runs is removed, and
a cgroup only when no process is left in it.  Removing the cgroup and the pins frees
the program.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from pathlib import Path

from ._bpf import CGROUP_PREFIX, RUN_ROOT, _mounts, _rmdir_if_empty

_OWNED = re.compile(r"^(?:reservoir-cwnd-|reservoir-|bpffs-|cgroup2-)(\d+)-[0-9a-f]+$")


def _dead_owner(name: str) -> bool:
    """Whether ``name`` is one of ours and its owner no longer runs (gone, or a zombie
    nobody reaps: a killed agent whose parent died before it)."""
    match = _OWNED.match(name)
    if match is None:
        return False
    try:
        stat = Path(f"/proc/{match.group(1)}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].startswith("Z")


def cleanup_stale() -> list[str]:
    """Removes the leftovers of dead owners; returns what was removed (for the log)."""
    removed: list[str] = []
    mounts = _mounts()
    for _, point, fstype in mounts:
        if fstype == "cgroup2":
            removed += _stale_cgroups(point)
        elif fstype == "bpf" and not _dead_owner(point.name):
            removed += _stale_pins(point)
    for _, point, fstype in mounts:
        if point.parent == RUN_ROOT and _dead_owner(point.name):
            removed += _stale_mount(point, fstype)
    if removed:
        _rmdir_if_empty(RUN_ROOT)
    return removed


def _stale_cgroups(root: Path) -> list[str]:
    removed = []
    for cgroup in root.glob(f"**/{CGROUP_PREFIX}*"):
        if not cgroup.is_dir() or not _dead_owner(cgroup.name):
            continue
        with contextlib.suppress(OSError):
            if (cgroup / "cgroup.procs").read_text().strip():
                continue  # a process (a child of the dead agent) still lives in it
            cgroup.rmdir()
            removed.append(str(cgroup))
    return removed


def _stale_pins(bpffs: Path) -> list[str]:
    removed = []
    for pins in bpffs.glob("reservoir-*"):
        if pins.is_dir() and _dead_owner(pins.name):
            _unpin_tree(pins)
            removed.append(str(pins))
    return removed


def _stale_mount(point: Path, fstype: str) -> list[str]:
    if fstype == "bpf":
        _unpin_tree(point, keep_root=True)
    done = subprocess.run(["umount", str(point)], capture_output=True, check=False)
    if done.returncode != 0:
        return []
    with contextlib.suppress(OSError):
        point.rmdir()
    return [str(point)]


def _unpin_tree(top: Path, *, keep_root: bool = False) -> None:
    """Unlinks pinned objects (files) and their folders, deepest first."""
    for path in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            path.rmdir() if path.is_dir() else path.unlink()
    if not keep_root:
        with contextlib.suppress(OSError):
            top.rmdir()
