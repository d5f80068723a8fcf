"""A campaign run's progress: ``progress.json`` in the output folder (rewritten
atomically at every change, for the coordinator and the dashboard) and the lines a
person at the terminal sees (one status line rewritten in place on a TTY, a line every
PLAIN_EVERY_S otherwise, and one line per finished run).

``progress.json``::

    {"state": "running", "done": 3, "total": 24, "scenario": "reservoir-s16-...",
     "repetition": 1, "elapsed_s": 412.5, "eta_s": 1630.0, "error": null}

``state`` is running, completed, failed (a run failed, or the campaign could not
start) or cancelled; ``repetition`` counts from 1. The ETA is the time model of
campaigns/_estimate.py for the runs left, scaled by how the finished runs compared with it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from reservoir.campaigns.results import Run, stream_limits
from reservoir.common.store import write_atomic

__all__ = ["Progress"]

PLAIN_EVERY_S = 10.0
TTY_EVERY_S = 0.5


def _rate(bps: float) -> str:
    return f"{bps / 1e9:.2f} Gbit/s" if bps >= 1e9 else f"{bps / 1e6:.0f} Mbit/s"


def _duration(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


@dataclass
class Progress:
    out: Path
    estimates: Sequence[float]
    """The model's seconds for each planned run, in order."""
    stream: TextIO = field(default_factory=lambda: sys.stdout)
    log: Callable[[str], None] = lambda line: None
    state: str = "running"
    done: int = 0
    scenario: str | None = None
    repetition: int | None = None
    error: str | None = None
    started: float = field(default_factory=time.monotonic)
    _run_started: float = 0.0
    _spent: float = 0.0  # seconds the finished runs took
    _last_print: float = 0.0

    @property
    def total(self) -> int:
        return len(self.estimates)

    @property
    def tty(self) -> bool:
        return self.stream.isatty()

    def eta_s(self, fraction: float = 0.0) -> float | None:
        """Seconds left: the model's, scaled by actual/model over the finished runs."""
        if self.done >= self.total:
            return 0.0
        model_done = sum(self.estimates[: self.done])
        scale = self._spent / model_done if model_done > 0 and self._spent > 0 else 1.0
        left = sum(self.estimates[self.done :]) - fraction * self.estimates[self.done]
        return max(0.0, left * scale)

    def to_json(self, fraction: float = 0.0) -> dict[str, Any]:
        return {
            "state": self.state,
            "done": self.done,
            "total": self.total,
            "scenario": self.scenario,
            "repetition": self.repetition,
            "elapsed_s": round(time.monotonic() - self.started, 1),
            "eta_s": None if self.state != "running" else round(self.eta_s(fraction) or 0, 1),
            "error": self.error,
        }

    def write(self, fraction: float = 0.0) -> None:
        text = json.dumps(self.to_json(fraction)) + "\n"
        # rewritten every second: a crash may lose the last one, no fsync
        write_atomic(self.out / "progress.json", text.encode(), mode=0o644, durable=False)

    def say(self, line: str) -> None:
        """A line for the person and the log (ends a TTY status line first)."""
        if self.tty:
            self.stream.write("\r\033[K")
        print(line, file=self.stream, flush=True)
        self.log(line)

    def begin(self, scenario: str, repetition: int) -> None:
        self.scenario, self.repetition = scenario, repetition
        self._run_started = time.monotonic()
        self.write()
        self.say(f"[{self.done + 1}/{self.total}] {scenario} (run {repetition}) ...")

    def tick(self, fraction: float, bps: float) -> None:
        now = time.monotonic()
        every = TTY_EVERY_S if self.tty else PLAIN_EVERY_S
        if now - self._last_print < every:
            return
        self._last_print = now
        self.write(fraction)
        eta = self.eta_s(fraction)
        rate = _rate(bps) if bps else ""
        text = (
            f"  {fraction:6.1%}  {rate:>12}  run {now - self._run_started:5.0f} s"
            f"  campaign ETA {_duration(eta or 0)}"
        )
        if self.tty:
            self.stream.write("\r\033[K" + text)
            self.stream.flush()
        else:
            print(text, file=self.stream, flush=True)

    def end(self, run: Run) -> None:
        self._spent += time.monotonic() - self._run_started
        self.done += 1
        self.write()
        if run.error is not None:
            self.say(f"  FAILED after {run.seconds:.1f} s: {run.error}")
            return
        extra = f", Jain {run.jain:.3f}" if run.jain is not None else ""
        if run.failover is not None:
            back = run.failover.back_after_s
            extra += f", lost {run.failover.lost_seconds:.2f} s"
            extra += f", back after {'never' if back is None else f'{back:.2f} s'}"
        if run.verified is not None:
            extra += ", verified" if run.verified else ", NOT verified"
        idle, rwnd, sndbuf = stream_limits(run)
        if idle is not None:
            extra += f"; streams idle {idle:.0%}"
            extra += f", rwnd-limited {rwnd or 0:.0%}, sndbuf-limited {sndbuf or 0:.0%}"
        self.say(
            f"  {run.bytes / 1e9:.2f} GB in {run.seconds:.1f} s: {_rate(run.goodput_bps)}"
            f"{extra}, CPU {run.cpu_seconds:.1f} s"
        )

    def finish(self, state: str, error: str | None = None) -> None:
        self.state, self.error = state, error
        self.scenario = self.repetition = None
        self.write()
