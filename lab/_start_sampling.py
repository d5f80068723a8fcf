"""What :mod:`reservoir.lab.bench_start` measures: the bytes a lab host receives on its
links, read every few milliseconds, and when a copy's data first arrived and first
arrived at 90% of the bottleneck.

The counters are the ``rx_bytes`` of the host's own end of each link, read from
``/proc/thread-self/net/dev`` by a thread that entered the host's network namespace
(reading the file costs tens of microseconds, where ``ip -s link`` costs a process).
Times are ``time.monotonic()``, the clock the agent's copies count in too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType

from reservoir.lab.coord_site import inside

INTERVAL = 0.002
DATA = 64 << 10  # more than logins, probes and pings together: the copy's data is flowing


def read_rx(text: str, devices: Sequence[str]) -> int:
    """The received bytes of ``devices`` together, from a /proc/net/dev text."""
    total = 0
    for line in text.splitlines():
        name, colon, counters = line.partition(":")
        if colon and name.strip() in devices:
            total += int(counters.split()[0])
    return total


@dataclass
class RxSampler:
    """Samples (time, rx bytes of ``devices``) in namespace ``ns`` while in ``with``."""

    ns: str
    devices: list[str]
    interval: float = INTERVAL
    samples: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        with inside(self.ns), open("/proc/thread-self/net/dev") as dev:
            while not self._stop.wait(self.interval):
                dev.seek(0)
                self.samples.append((time.monotonic(), read_rx(dev.read(), self.devices)))

    def __enter__(self) -> RxSampler:
        self._thread = threading.Thread(target=self._run, name=f"rx-{self.ns}", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


@dataclass(frozen=True)
class Start:
    """When a copy's data first arrived (None: never), and the end of the first window
    in which it arrived at 90% of the bottleneck or more (None: never)."""

    first_byte: float | None
    at_90: float | None


def start_of(
    samples: Sequence[tuple[float, int]], asked: float, rate: float, window: float
) -> Start:
    """The start of a copy asked for at ``asked`` from the receiver's samples; ``rate``
    is the bottleneck in bytes per second, averaged over ``window`` seconds."""
    after = [(t, b) for t, b in samples if t >= asked]
    if not after:
        return Start(None, None)
    base = after[0][1]
    first = next((t for t, b in after if b - base >= DATA), None)
    if first is None:
        return Start(None, None)
    return Start(first, _first_at(after, 0.9 * rate, window, first))


def _first_at(
    samples: Sequence[tuple[float, int]], rate: float, window: float, since: float
) -> float | None:
    """The end of the first ``window`` after ``since`` whose mean rate is ``rate`` or more."""
    j = 0
    for t, b in samples:
        while j + 1 < len(samples) and samples[j + 1][0] <= t - window:
            j += 1
        t0, b0 = samples[j]
        if t >= since and t - t0 >= window and (b - b0) / (t - t0) >= rate:
            return t
    return None
