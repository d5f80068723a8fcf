"""The copies' streams and paths added up from their telemetry files, for the metrics.

A copy's telemetry file (:mod:`.telemetry`) has one ``stream`` record per stream and
sampling interval: how much TCP_INFO counters grew over the interval (``bytes``
acknowledged, ``retransmits``, ``busy_us``, ``rwnd_limited_us``,
``sndbuf_limited_us``) and the state at its end (``snd_cwnd``, ``in_flight_bytes``,
``rtt``); ``path`` records say when a path's health changed. :class:`CopyTotals`
reads what was appended since its last read and adds the growths up per stream and
path: counters that only grow, across reconnects (a new socket's TCP_INFO starts
again from 0, the growths of its records do not).

Reading starts where the copy's telemetry ended when it was last started in this
process (:attr:`CopyJob.telemetry_from`), never at the history of its earlier runs;
a line still being written (no newline yet) waits for the next read and one that does
not parse (torn by a crash) is skipped. :class:`TelemetryTotals` keeps the totals of
the copies the metrics show and, per path, the sums over every copy read since the
agent started.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CopyTotals", "PathTotals", "StreamTotals", "TelemetryTotals"]

CHUNK = 4 << 20  # bytes read at once: a first read of a long run is not held in memory


def _count(value: Any) -> int:
    """A counter's growth as a record gives it: a non-negative integer, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _gauge(value: Any) -> int | None:
    """A state value as a record gives it, or None where it is missing or not a number."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(slots=True)
class PathTotals:
    """What the streams of a path sent and retransmitted."""

    sent_bytes: int = 0
    retransmits: int = 0


@dataclass(slots=True)
class StreamTotals:
    """One stream's counters added up, and its state in its latest record."""

    sent_bytes: int = 0  # acknowledged by the peer (TCP_INFO bytes_acked)
    retransmits: int = 0  # segments
    busy_us: int = 0
    rwnd_limited_us: int = 0
    sndbuf_limited_us: int = 0
    time: float = 0.0  # of its latest record (Unix seconds)
    cwnd_bytes: int | None = None
    in_flight_bytes: int | None = None
    rtt_us: int | None = None

    def add(self, record: Mapping[str, Any], path: PathTotals) -> None:
        """Adds one interval's record (and its bytes and retransmits to ``path``)."""
        sent, retransmits = _count(record.get("bytes")), _count(record.get("retransmits"))
        self.sent_bytes += sent
        self.retransmits += retransmits
        path.sent_bytes += sent
        path.retransmits += retransmits
        self.busy_us += _count(record.get("busy_us"))
        self.rwnd_limited_us += _count(record.get("rwnd_limited_us"))
        self.sndbuf_limited_us += _count(record.get("sndbuf_limited_us"))
        when = record.get("time")
        if isinstance(when, int | float):
            self.time = max(self.time, float(when))
        self.cwnd_bytes = _gauge(record.get("snd_cwnd"))
        self.in_flight_bytes = _gauge(record.get("in_flight_bytes"))
        self.rtt_us = _gauge(record.get("rtt"))


@dataclass
class CopyTotals:
    """The totals of one copy's telemetry file, read from ``offset`` on."""

    file: Path
    offset: int
    streams: dict[tuple[str, str], StreamTotals] = field(default_factory=dict)  # (stream, path)
    path_states: dict[str, str] = field(default_factory=dict)  # path -> its latest state

    def read(self, paths: dict[str, PathTotals]) -> None:
        """Adds the records appended since the last read (the streams' bytes and
        retransmits also to ``paths``, per path)."""
        try:
            f = open(self.file, "rb")  # noqa: SIM115  # closed below; no file: nothing yet
        except FileNotFoundError:
            return
        with f:
            if f.seek(0, os.SEEK_END) < self.offset:  # cut or replaced: start again
                self.offset, self.streams, self.path_states = 0, {}, {}
            f.seek(self.offset)
            while chunk := f.read(CHUNK):
                whole = chunk[: chunk.rfind(b"\n") + 1]
                if not whole:  # a line still being written
                    break
                self.offset += len(whole)
                self._lines(whole, paths)
                f.seek(self.offset)

    def _lines(self, lines: bytes, paths: dict[str, PathTotals]) -> None:
        for line in lines.splitlines():
            try:
                record = json.loads(line)
            except ValueError:  # torn by a crash
                continue
            if isinstance(record, dict):
                self._add(record, paths)

    def _add(self, record: dict[str, Any], paths: dict[str, PathTotals]) -> None:
        kind, path = record.get("type"), record.get("path")
        if not isinstance(path, str):
            return
        if kind == "stream" and isinstance(stream := record.get("stream"), str):
            totals = self.streams.setdefault((stream, path), StreamTotals())
            totals.add(record, paths.setdefault(path, PathTotals()))
        elif kind == "path" and isinstance(state := record.get("state"), str):
            self.path_states[path] = state

    def newest(self) -> float:
        """The time of its newest stream record (0 if none)."""
        return max((s.time for s in self.streams.values()), default=0.0)


class TelemetryTotals:
    """The totals of the copies the metrics show, and per path over every copy read."""

    def __init__(self) -> None:
        self.copies: dict[str, CopyTotals] = {}
        self.paths: dict[str, PathTotals] = {}

    def update(self, files: Mapping[str, tuple[Path, int]]) -> dict[str, CopyTotals]:
        """Reads what each copy of ``files`` (its id -> its telemetry file and the
        offset where its run in this process began) appended since the last call, and
        forgets the copies not in ``files``; the totals of those in ``files``."""
        for gone in set(self.copies) - set(files):
            del self.copies[gone]
        for copy_id, (file, offset) in files.items():
            totals = self.copies.get(copy_id)
            if totals is None or totals.file != file:
                totals = self.copies[copy_id] = CopyTotals(file, offset)
            totals.read(self.paths)
        return dict(self.copies)
