"""A copy's telemetry: the engine's JSON-lines file (``CopyOptions.telemetry``), one per
copy in the state folder, appended to by every run of the copy. Its records carry a
``type``: ``"stream"`` (TCP_INFO of a stream, iperf3 names, 2 Hz), ``"path"`` (a path
state change) and ``"progress"`` (extents and bytes done)."""

from __future__ import annotations

import collections
import json
from pathlib import Path

from reservoir.agent.telemetry import Record

__all__ = ["read_tail"]


def read_tail(path: Path, limit: int) -> list[Record]:
    """The last ``limit`` records of ``path`` (none if the file does not exist)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = collections.deque(f, maxlen=limit)
    except FileNotFoundError:
        return []
    records: list[Record] = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:  # a line being written
            continue
        if isinstance(record, dict):
            records.append(record)
    return records
