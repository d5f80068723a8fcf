"""Per-link byte counters of a lab host, sampled every 0.25 s, and what they tell.

The counters are the ``tx_bytes`` of the host's own end of each link (``ip -s -j link
show``): what the host put on the wire, headers included, whichever stream or subflow
sent it. Times are Unix seconds (``time.time()``), like the copy's telemetry records.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from itertools import pairwise
from types import TracebackType

from reservoir.lab import netns
from reservoir.lab.errors import LabError

INTERVAL = 0.25


def link_devices(ns: str, addrs: dict[str, str]) -> dict[str, str]:
    """The device of each link in namespace ``ns``, found by its address (link -> addr)."""
    out = netns.run(["ip", "-n", ns, "-j", "addr"], f"ip -j addr in {ns}")
    by_addr = {a["local"]: i["ifname"] for i in json.loads(out) for a in i.get("addr_info", [])}
    missing = [addr for addr in addrs.values() if addr not in by_addr]
    if missing:
        raise LabError(f"no device with address {', '.join(missing)} in {ns}")
    return {link: str(by_addr[addr]) for link, addr in addrs.items()}


def read_tx(ns: str, devices: dict[str, str]) -> dict[str, int]:
    """``tx_bytes`` of each link's device (link -> device) in namespace ``ns``."""
    out = netns.run(["ip", "-n", ns, "-s", "-j", "link", "show"], f"ip -s link in {ns}")
    by_dev = {i["ifname"]: int(i["stats64"]["tx"]["bytes"]) for i in json.loads(out)}
    return {link: by_dev[dev] for link, dev in devices.items()}


@dataclass
class Sample:
    t: float
    tx: dict[str, int]


@dataclass
class Bin:
    """The rate of each link (Mbit/s) over ``[t - dt, t]``."""

    t: float
    dt: float
    mbit: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.mbit.values())


@dataclass
class LinkSampler:
    """Samples the links' tx counters in a thread while in the ``with`` block."""

    ns: str
    devices: dict[str, str]
    interval: float = INTERVAL
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _sample(self) -> Sample:
        before = time.time()
        tx = read_tx(self.ns, self.devices)
        return Sample((before + time.time()) / 2, tx)

    def _run(self) -> None:
        start, k = time.monotonic(), 1
        while not self._stop.wait(max(0.0, start + k * self.interval - time.monotonic())):
            self.samples.append(self._sample())
            k = max(k + 1, int((time.monotonic() - start) / self.interval) + 1)

    def __enter__(self) -> LinkSampler:
        self.samples.append(self._sample())
        self._thread = threading.Thread(target=self._run, name="link-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.samples.append(self._sample())

    def sent(self) -> dict[str, int]:
        """Bytes sent on each link since the sampler started."""
        first, last = self.samples[0], self.samples[-1]
        return {link: last.tx[link] - first.tx[link] for link in first.tx}

    def bins(self) -> list[Bin]:
        return [
            Bin(b.t, b.t - a.t, {k: (b.tx[k] - a.tx[k]) * 8 / (b.t - a.t) / 1e6 for k in a.tx})
            for a, b in pairwise(self.samples)
            if b.t > a.t
        ]


def mean_rate(bins: list[Bin], link: str, t0: float, t1: float) -> float:
    """Mean rate (Mbit/s) of ``link`` over the bins that end in ``(t0, t1]``."""
    inside = [b for b in bins if t0 < b.t <= t1]
    seconds = sum(b.dt for b in inside)
    return sum(b.mbit[link] * b.dt for b in inside) / seconds if seconds > 0 else 0.0


def lost_seconds(bins: list[Bin], t0: float, t1: float, reference: float) -> float:
    """Integral over ``[t0, t1]`` of ``max(0, reference - total) / reference`` (seconds
    during which all links together carried less than ``reference``)."""
    if reference <= 0:
        return float("nan")
    inside = [b for b in bins if t0 < b.t <= t1 + INTERVAL / 2]
    return sum(max(0.0, reference - b.total) / reference * b.dt for b in inside)


def back_after(bins: list[Bin], link: str, since: float, threshold: float) -> float | None:
    """Seconds from ``since`` to the end of the first later bin where ``link`` carries
    more than ``threshold`` Mbit/s; None if it never does."""
    for b in bins:
        if b.t - b.dt >= since - 0.01 and b.mbit[link] > threshold:
            return b.t - since
    return None


def series_lines(bins: list[Bin], t0: float, t1: float, origin: float) -> list[str]:
    """The bins in ``[t0, t1]`` two to a line: time from ``origin``, then each link's
    Mbit/s and the total, for both bins."""
    inside = [b for b in bins if t0 <= b.t <= t1]
    links = sorted(inside[0].mbit) if inside else []
    lines = []
    for i in range(0, len(inside), 2):
        pair = inside[i : i + 2]
        cells = [" ".join(f"{b.mbit[k]:4.0f}" for b in pair) for k in links]
        total = " ".join(f"{b.total:4.0f}" for b in pair)
        row = "  ".join(f"{k} {c:>9}" for k, c in zip(links, cells, strict=True))
        lines.append(f"    {pair[0].t - origin:+6.2f} s  {row}  total {total:>9}")
    return lines
