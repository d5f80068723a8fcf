"""Reservoir's systemd unit files: rendered from the shipped templates, written and
removed only where Reservoir wrote them.

A template names the ``reservoir`` script as :data:`PLACEHOLDER`; :func:`render_unit`
puts an absolute path in its place and :data:`MARK` on the first line. Every file
concerned is checked before any is written or removed: a file of that name whose first
line is not the mark (an operator's own unit, a masked unit's link to /dev/null) stops
the whole command and is left as it is.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from reservoir.common.errors import ReservoirError
from reservoir.common.store import fsync_dir, marked, write_atomic
from reservoir.shipped import config_dir

__all__ = [
    "MARK",
    "PLACEHOLDER",
    "UNITS",
    "UNIT_DIR",
    "Outcome",
    "UnitFileError",
    "hidden_from_units",
    "install_units",
    "remove_units",
    "render_unit",
    "reservoir_executable",
]

UNIT_DIR = Path("/etc/systemd/system")
UNITS = {
    "agent": "reservoir-agent.service",
    "target": "reservoir-target.service",
    "coordinator": "reservoir-coordinator.service",
}
"""Each unit by its short name on the command line, and its file name."""
PLACEHOLDER = "@RESERVOIR@"
MARK = "# written by reservoir system install-units; removed by --remove"
HIDDEN = tuple(Path(p) for p in ("/home", "/root", "/run/user", "/tmp", "/var/tmp"))
"""Where the units' services see nothing of the host's files (ProtectHome=, PrivateTmp=)."""
# What ExecStart takes as a path without quoting or specifier escapes (no blank,
# quote, backslash, "%" or "$").
PLAIN_PATH = re.compile(r"/[A-Za-z0-9._+/@:=,-]*")


class UnitFileError(ReservoirError):
    """A unit file cannot be written or removed, or is not Reservoir's."""


@dataclass(frozen=True)
class Outcome:
    """What was done (or, in a dry run, would be done) to one unit file."""

    path: Path
    action: str  # written, replaced, unchanged, removed, absent
    text: str = ""  # the unit as written (empty for a removal)


def reservoir_executable() -> Path:
    """The ``reservoir`` script of the running installation: beside its interpreter
    (``sys.executable`` as started, a virtual environment's bin/ not resolved)."""
    script = Path(sys.executable).absolute().parent / "reservoir"
    if not (script.is_file() and os.access(script, os.X_OK)):
        raise UnitFileError(
            f"no reservoir script beside {sys.executable}: name it with --reservoir PATH"
        )
    return script


def hidden_from_units(executable: Path) -> list[Path]:
    """What the services need to start ``executable`` (the script and the interpreter
    its first line names, links followed) and the units hide from them."""
    needed = [executable.resolve()]
    interpreter = _interpreter(executable)
    if interpreter is not None:
        needed.append(interpreter.resolve())
    return [path for path in needed if any(path.is_relative_to(h) for h in HIDDEN)]


def _interpreter(script: Path) -> Path | None:
    """The program of a ``#!`` line, or None (not a script, not readable)."""
    try:
        with open(script, "rb") as f:
            first = f.readline(4096)
    except OSError:
        return None
    words = first[2:].decode(errors="replace").split() if first.startswith(b"#!") else []
    return Path(words[0]) if words else None


def render_unit(name: str, executable: Path) -> str:
    """The unit file ``name`` (a value of :data:`UNITS`) running ``executable``."""
    if not executable.is_absolute() or not PLAIN_PATH.fullmatch(str(executable)):
        raise UnitFileError(
            f"{executable}: ExecStart needs an absolute path without blanks, quotes, "
            "backslashes, % or $"
        )
    template = (config_dir() / "systemd" / name).read_text(encoding="utf-8")
    if PLACEHOLDER not in template:
        raise UnitFileError(f"the shipped {name} has no {PLACEHOLDER}: reinstall Reservoir")
    return f"{MARK}\n{template.replace(PLACEHOLDER, str(executable))}"


def install_units(
    names: Iterable[str], unit_dir: Path, executable: Path, *, dry_run: bool = False
) -> list[Outcome]:
    """Writes the units ``names`` (keys of :data:`UNITS`) into ``unit_dir`` (0644,
    atomically); what was done to each. UnitFileError, before anything is written,
    when one of the files exists and is not Reservoir's."""
    texts = {unit_dir / UNITS[n]: render_unit(UNITS[n], executable) for n in names}
    for path in texts:
        _check_ours(path)
    outcomes = []
    for path, text in texts.items():
        old = _read(path)
        action = "unchanged" if old == text else "written" if old is None else "replaced"
        if action != "unchanged" and not dry_run:
            _write(path, text)
        outcomes.append(Outcome(path, action, text))
    return outcomes


def remove_units(names: Iterable[str], unit_dir: Path, *, dry_run: bool = False) -> list[Outcome]:
    """Removes the units ``names`` from ``unit_dir``; what was done to each.
    UnitFileError, before anything is removed, when one of them is not Reservoir's."""
    paths = [unit_dir / UNITS[n] for n in names]
    for path in paths:
        _check_ours(path)
    outcomes = []
    for path in paths:
        present = path.is_symlink() or path.exists()
        if present and not dry_run:
            path.unlink()
            fsync_dir(path.parent)
        outcomes.append(Outcome(path, "removed" if present else "absent"))
    return outcomes


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text.encode(), mode=0o644)
    except OSError as exc:
        raise UnitFileError(f"{path}: {exc.strerror}") from None


def _read(path: Path) -> str | None:
    """The file's text, or None where there is none."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise UnitFileError(f"{path}: {exc}") from None


def _check_ours(path: Path) -> None:
    """UnitFileError unless ``path`` is absent or a regular file whose first line is
    :data:`MARK`."""
    try:
        ours = marked(path, MARK)
    except OSError as exc:
        raise UnitFileError(f"{path}: {exc.strerror}") from None
    if ours is False and path.is_symlink():
        raise UnitFileError(f"{path} is a link (a masked or linked unit): left as it is")
    if ours is False:
        raise UnitFileError(f"{path} exists and was not written by Reservoir: left as it is")
