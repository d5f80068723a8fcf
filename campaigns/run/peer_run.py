"""One gridftp or xrdcp run (design section 5): the scenario's ``size`` copied disk to
disk from the source's namespace into servers in the destination's, timed and checked
by lab/peer_copy.py (``sync`` first, the clock to the destination fsynced, the
destination hashed against the source).

The streams are dealt to the paths as iperf3's are (``iperf3_run.legs``): one server
per path, bound to the destination's address on it, and one client per path with that
path's share of the streams. With one path the client sends the source file itself;
with several, each sends its part of the source (a byte range in proportion to its
streams, cut once per source before any clock runs), and the destination's parts, one
after the other, must hash to the source's digest. Pacing ``per-nic`` paces the
source's NICs as for iperf3. The tools have no option for the congestion control:
their namespaces' default is set to the scenario's ``cc`` for the run. CPU: the
clients' and the servers' user + system time. A destination that differs from the
source makes the run a failure, not a figure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from reservoir.campaigns._scenario import Event as Planned
from reservoir.campaigns._scenario import Scenario
from reservoir.campaigns.results import Event, Interval, Run, Sample, Stream
from reservoir.campaigns.run.iperf3_run import legs, paced
from reservoir.campaigns.run.site import Place
from reservoir.campaigns.run.telemetry import failover, intervals, scenario_record
from reservoir.campaigns.run.timeline import Timeline, nic_rates, sampler
from reservoir.lab.bench_copy import Source, write_source
from reservoir.lab.peer_copy import Leg, PeerCopy, timed_copy
from reservoir.lab.peers import PeerError
from reservoir.lab.transfer_peers import (
    GridftpServer,
    Server,
    XrootdServer,
    nobody_dir,
    nobody_parent,
)

__all__ = ["PeerSources", "run_peer", "shares"]

PORTS: dict[str, tuple[type[Server], int]] = {
    "gridftp": (GridftpServer, 5401),
    "xrdcp": (XrootdServer, 5501),
}
"""Each tool's server and the port of its first path's server (the next paths', +1)."""
ALIGN = 1 << 20
PARTS = "peer-parts"  # in the work folder: the source cut by the paths' streams
MIN_TIMEOUT_S = 300.0
CC_KEY = "net.ipv4.tcp_congestion_control"
CC_ALLOWED = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
Progress = Callable[[float, float], None]  # (fraction done, bit/s so far)


def shares(size: int, streams: list[int]) -> list[int]:
    """``size`` cut in proportion to ``streams``, each share but the last a multiple of
    1 MiB, the last what remains."""
    total = sum(streams)
    out = [size * n // total // ALIGN * ALIGN for n in streams[:-1]]
    return [*out, size - sum(out)]


@dataclass
class PeerSources:
    """The files the peers send: a site's source when the runner has one of the size,
    else one of their own (random, like a site's, kept until another size is needed);
    and the parts of a source for a run over several paths (one split at a time)."""

    work: Path
    own: Source | None = None
    parts: dict[tuple[str, tuple[int, ...]], list[Path]] = field(default_factory=dict)

    def source(self, size: int, site: Source | None) -> Source:
        if site is not None and site.size == size:
            return site
        if self.own is None or self.own.size != size:
            self._drop_own()
            folder = self.work / f"peer-source-{size}"
            folder.mkdir(parents=True, exist_ok=True)
            self.own = write_source(folder / "source.img", size, 0)
        return self.own

    def split(self, source: Source, sizes: list[int]) -> list[Path]:
        """The files whose contents, one after the other, are the source's."""
        if len(sizes) == 1:
            return [source.path]
        key = (source.digest, tuple(sizes))
        if key not in self.parts:
            self._drop_parts()
            folder = self.work / PARTS
            folder.mkdir(parents=True, exist_ok=True)
            self.parts[key] = _cut(source.path, sizes, folder)
        return self.parts[key]

    def _drop_parts(self) -> None:
        shutil.rmtree(self.work / PARTS, ignore_errors=True)
        self.parts.clear()

    def _drop_own(self) -> None:
        if self.own is not None:
            shutil.rmtree(self.own.path.parent, ignore_errors=True)
            self.own = None

    def close(self) -> None:
        self._drop_parts()
        self._drop_own()


def _cut(path: Path, sizes: list[int], folder: Path) -> list[Path]:
    out = []
    with open(path, "rb") as src:
        offset = 0
        for i, size in enumerate(sizes):
            part = folder / f"part-{i}"
            with open(part, "wb") as dst:
                left = size
                while left > 0:
                    n = os.copy_file_range(src.fileno(), dst.fileno(), left, offset, None)
                    if n == 0:
                        raise PeerError(f"{path}: ends before {offset + left} bytes")
                    offset, left = offset + n, left - n
                os.fsync(dst.fileno())
            out.append(part)
    return out


@contextmanager
def default_cc(place: Place, cc: str) -> Iterator[None]:
    """The source's and destination's default congestion control set to ``cc`` for the
    ``with`` block, restored after."""
    hosts = list(dict.fromkeys((place.source, place.destination)))
    before = {h: place.lab.exec(h, ["sysctl", "-n", CC_KEY]).stdout.strip() for h in hosts}
    changed = []
    try:
        for host in hosts:
            if before[host] == cc:
                continue
            done = place.lab.exec(host, ["sysctl", "-qw", f"{CC_KEY}={cc}"], check=False)
            if done.returncode != 0:
                allowed = CC_ALLOWED.read_text().strip()
                raise PeerError(
                    f"cc {cc}: gridftp and xrdcp use their namespace's default congestion"
                    f" control, and a namespace here may only default to one of {allowed}"
                    f" ({done.stderr.strip()})"
                )
            changed.append(host)
        yield
    finally:
        for host in changed:
            place.lab.exec(host, ["sysctl", "-qw", f"{CC_KEY}={before[host]}"], check=False)


def _timeout(place: Place, size: int) -> float:
    """Ten times the size at the slowest of 100 Mbit/s and the paths' sum."""
    rate = sum(p.rate_bps for p in place.paths) or 1e9
    return max(MIN_TIMEOUT_S, 10 * size * 8 / min(rate, 1e8))


def progress_intervals(progress: list[tuple[float, int]]) -> list[Interval]:
    """Per-second goodput from the bytes on disk over time."""
    samples, prev_t, prev_b = [], 0.0, 0
    for t, b in progress:
        if t > prev_t:
            samples.append(Sample(t, (b - prev_b) * 8 / (t - prev_t)))
            prev_t, prev_b = t, b
    return intervals([Stream("written", None, samples)])


def _record(sc: Scenario, repetition: int, copy: PeerCopy, fired: list[Event]) -> Run:
    notes = [Event(0.0, "note", copy.note)] if copy.note else []
    cpu = f"CPU: client {copy.client_cpu_s:.2f} s, server {copy.server_cpu_s:.2f} s"
    notes.append(Event(copy.seconds, "note", cpu))
    run = Run(
        scenario_record(sc),
        repetition,
        copy.started,
        copy.seconds,
        copy.bytes,
        copy.goodput_bps,
        copy.client_cpu_s + copy.server_cpu_s,
        verified=copy.matched,
        intervals=progress_intervals(copy.progress),
        events=sorted([*notes, *fired], key=lambda e: e.t),
    )
    if not copy.matched:
        run.error = f"the destination differs from the source: {sc.tool} did not copy it whole"
    return run


def run_peer(
    place: Place,
    scenario: Scenario,
    source: Source,
    sources: PeerSources,
    *,
    repetition: int,
    events: tuple[Planned, ...],
    work: Path,
    tick: Progress,
) -> Run:
    """One repetition of a gridftp or xrdcp scenario; raises on failure (the runner
    records it)."""
    server_type, base_port = PORTS[scenario.tool]
    ls = legs(place, scenario.streams)
    files = sources.split(source, shares(source.size, [leg.streams for leg in ls]))
    rates = nic_rates(place, scenario) if scenario.pacing == "per-nic" else {}
    timeline = Timeline(place, events)
    link_sampler = sampler(place)

    def watch(elapsed: float, done: int) -> None:
        timeline.poll()
        tick(done / source.size, done * 8 / elapsed if elapsed > 0 else 0.0)

    with ExitStack() as stack:
        stack.callback(timeline.restore)
        root = stack.enter_context(nobody_dir(nobody_parent(work), prefix="destination-"))
        stack.enter_context(default_cc(place, scenario.cc))
        stack.enter_context(paced(place, rates, work))
        peer_legs = []
        for i, (leg, f) in enumerate(zip(ls, files, strict=True)):
            server = server_type(root, leg.dst, base_port + i, place.dst_ns)
            stack.enter_context(server)
            peer_legs.append(Leg(server, f, root / f"part-{i}", leg.streams, place.src_ns))
        if link_sampler is not None:
            stack.enter_context(link_sampler)
        timeout = _timeout(place, source.size)
        copy = timed_copy(
            peer_legs, source.digest, timeout=timeout, watch=watch, on_start=timeline.start
        )
    run = _record(scenario, repetition, copy, timeline.fired)
    if link_sampler is not None:
        run.failover = failover(link_sampler.bins(), timeline.fired, timeline.started)
    return run
