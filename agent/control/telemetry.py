"""A copy's telemetry: the engine's JSON-lines file (``CopyOptions.telemetry``), one per
copy in the state folder, appended to by every run of the copy. Its records carry a
``type``: ``"stream"`` (TCP_INFO of a stream, iperf3 names, 2 Hz), ``"path"`` (a path
state change) and ``"progress"`` (extents and bytes done).

The coordinator asks for the newest records twice a second while a copy runs, so the
tail is read from the end of the file (not the whole file, which grows by thousands of
lines a minute) and served as the JSON it already is: each line is checked to parse,
never decoded into objects and encoded again."""

from __future__ import annotations

import json
import os
from pathlib import Path

from reservoir.agent.telemetry import Record

__all__ = ["read_tail", "tail_json", "tail_lines"]

CHUNK = 64 << 10


def tail_lines(path: Path, limit: int) -> list[bytes]:
    """The last ``limit`` whole lines of ``path``, without their newlines; a last line
    still being written (no newline yet) is left out. None if the file is missing."""
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
    lines = buf[: buf.rfind(b"\n") + 1].split(b"\n")[:-1]
    if pos > 0:
        lines = lines[1:]  # it may start mid-line: more than ``limit`` were read anyway
    return lines[-limit:] if limit else []


def _valid(lines: list[bytes]) -> list[tuple[bytes, Record]]:
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:  # a line torn by a crash
            continue
        if isinstance(record, dict):
            out.append((line, record))
    return out


def read_tail(path: Path, limit: int) -> list[Record]:
    """The last ``limit`` records of ``path`` (none if the file does not exist)."""
    return [record for _, record in _valid(tail_lines(path, limit))]


def tail_json(path: Path, limit: int) -> bytes:
    """:func:`read_tail` as a JSON array, made of the file's own lines."""
    return b"[" + b",".join(line for line, _ in _valid(tail_lines(path, limit))) + b"]"
