"""Files saved atomically: a reader sees the old file or the new one, never half of one,
even across a crash. The one writer of the project's state, configuration, checkpoint,
pacing state, results and progress files.

:func:`write_atomic` writes a temporary file beside the target (created with the mode
asked, 0600 by default), fsyncs it, renames it over the target and fsyncs the folder;
``durable=False`` skips both fsyncs for files rewritten every second whose last
version may be lost in a crash (a campaign's progress). :func:`write_json_atomic`
saves a JSON object that way, in a private folder it creates. :func:`marked` tells a
file Reservoir wrote into a system folder (its first line a mark) from an operator's.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["fsync_dir", "marked", "read_json", "write_atomic", "write_json_atomic"]


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True) -> None:
    """``data`` as ``path`` (``mode``), never seen half written."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """``data`` as JSON in ``path`` (0600), its folder made (0700) if missing."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode())


def fsync_dir(folder: Path) -> None:
    """Makes a rename or unlink in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_json(path: Path) -> dict[str, Any]:
    """The object in ``path``; raises ``OSError`` or ``ValueError``."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return data


def marked(path: Path, mark: str) -> bool | None:
    """Whether the file ``path`` begins with the line ``mark`` (one Reservoir wrote and
    may replace or remove); None where there is no file; False for a symbolic link (an
    operator's, whatever it points to). Raises ``OSError`` for a file it cannot read."""
    if path.is_symlink():
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline().rstrip("\n")
    except FileNotFoundError:
        return None
    return first == mark
