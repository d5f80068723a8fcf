"""A copy's telemetry: the engine's JSON-lines file (``CopyOptions.telemetry``), one per
copy in the state folder, appended to by every run of the copy. Its records carry a
``type``: ``"stream"`` (TCP_INFO of a stream, iperf3 names, 2 Hz), ``"path"`` (a path
state change) and ``"progress"`` (extents and bytes done).

The coordinator asks for the newest records twice a second while a copy runs, so the
tail is read from the end of the file (not the whole file, which grows by thousands of
lines a minute) and served as the JSON it already is: each line is checked once, the
first time it is served (a line torn by a crash is left out), never decoded into
objects and encoded again."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from reservoir.agent.telemetry import Record

__all__ = ["TelemetryTail", "read_tail", "tail_lines"]

CHUNK = 64 << 10


def tail_lines(path: Path, limit: int) -> list[tuple[int, bytes]]:
    """The last ``limit`` whole lines of ``path`` with their offsets in it, without
    their newlines; a last line still being written (no newline yet) is left out, and
    a missing file has none."""
    try:
        f = open(path, "rb")  # noqa: SIM115  # closed below; a missing file is no tail
    except FileNotFoundError:
        return []
    with f:
        pos = f.seek(0, os.SEEK_END)
        buf = b""
        while pos > 0 and buf.count(b"\n") <= limit:
            step = min(CHUNK, pos)
            pos -= step
            f.seek(pos)
            buf = f.read(step) + buf
    out: list[tuple[int, bytes]] = []
    at = 0
    for line in buf[: buf.rfind(b"\n") + 1].split(b"\n")[:-1]:
        out.append((pos + at, line))
        at += len(line) + 1
    if pos > 0:
        out = out[1:]  # it may start mid-line: more than ``limit`` were read anyway
    return out[-limit:] if limit else []


@dataclass
class _Checked:
    """What was learnt of one file: lines before ``upto`` are checked, those at ``bad``
    offsets did not parse (torn by a crash)."""

    upto: int = 0
    bad: set[int] = field(default_factory=set)


class TelemetryTail:
    """Serves the tails of telemetry files, checking each line once: a line is parsed
    the first time it is served (twice a second, the new ones are a few dozen)."""

    def __init__(self) -> None:
        self._files: dict[Path, _Checked] = {}

    def json(self, path: Path, limit: int) -> bytes:
        """The last ``limit`` records of ``path`` as a JSON array of its own lines."""
        lines = tail_lines(path, limit)
        checked = self._files.setdefault(path, _Checked())
        if lines and lines[-1][0] < checked.upto - 1 - len(lines[-1][1]):
            checked = self._files[path] = _Checked()  # the file was cut or replaced
        for offset, line in lines:
            if offset >= checked.upto and not _parses(line):
                checked.bad.add(offset)
        if lines:
            checked.upto = max(checked.upto, lines[-1][0] + 1)
        return b"[" + b",".join(ln for at, ln in lines if at not in checked.bad) + b"]"


def _parses(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def read_tail(path: Path, limit: int) -> list[Record]:
    """The last ``limit`` records of ``path`` (none if the file does not exist)."""
    out = []
    for _, line in tail_lines(path, limit):
        try:
            record = json.loads(line)
        except ValueError:  # a line torn by a crash
            continue
        if isinstance(record, dict):
            out.append(record)
    return out
