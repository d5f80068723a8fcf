"""Progress of a copy, and the line the CLI prints on stderr.

On a terminal the line is redrawn about twice a second; otherwise a plain line is
written every few seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TextIO

TTY_INTERVAL = 0.5
PLAIN_INTERVAL = 5.0


@dataclass(frozen=True, slots=True)
class Progress:
    done_bytes: int  # this run, including extents skipped on resume
    total_bytes: int
    sent_bytes: int  # written by this run (retries included)
    elapsed: float
    extents_done: int
    extents_total: int
    streams_up: int
    streams: int
    paths_up: int
    paths: int

    @property
    def rate(self) -> float:
        """Bytes per second written by this run."""
        return self.sent_bytes / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def eta(self) -> float | None:
        left = self.total_bytes - self.done_bytes
        return left / self.rate if self.rate > 0 else None


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    raise AssertionError("unreachable")


def format_progress(p: Progress) -> str:
    eta = "--" if p.eta is None else f"{p.eta:.0f}s"
    share = 100 * p.done_bytes / p.total_bytes if p.total_bytes else 100.0
    return (
        f"{human_bytes(p.done_bytes)} / {human_bytes(p.total_bytes)} ({share:.0f}%)  "
        f"{p.rate / 1e6:.1f} MB/s  ETA {eta}  "
        f"streams {p.streams_up}/{p.streams}  paths {p.paths_up}/{p.paths}"
    )


class ProgressPrinter:
    """A ``progress`` callback for :func:`copy` that throttles what it prints."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.interval = TTY_INTERVAL if self.tty else PLAIN_INTERVAL
        self._last = 0.0
        self.last: Progress | None = None  # the latest, printed or not

    def __call__(self, progress: Progress) -> None:
        self.last = progress
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        line = format_progress(progress)
        if self.tty:
            self.stream.write(f"\r\x1b[K{line}")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self._last:
            self.stream.write("\n")
            self.stream.flush()


def interrupted(last: Progress | None, checkpoint: str | None, *, held: bool = True) -> str:
    """What a user who stopped a copy (Ctrl-C) is told: how far it got, and that it
    goes on with ``--resume``; where it ``held`` a remote destination, that the hold
    stays for that and ``--release`` gives the copy up."""
    where = f"in {checkpoint}" if checkpoint else "in its checkpoint"
    if last is None:
        done = "before its first extent"
    else:
        done = (
            f"with {last.extents_done} of {last.extents_total} extents done "
            f"({human_bytes(last.done_bytes)} of {human_bytes(last.total_bytes)}), kept {where}"
        )
    if not held:
        return f"interrupted {done}; the same command with --resume goes on from there"
    return (
        f"interrupted {done}; its remote destination stays held for the copy: the same "
        "command with --resume goes on from there, with --release gives the copy up"
    )
