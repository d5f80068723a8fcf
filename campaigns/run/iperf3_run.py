"""One iperf3 run: memory to memory over the campaign's paths (design section 5).

The streams are dealt to the paths as the coordinator deals a copy's
(``reservoir/common/placement.py``: in proportion to capacity; i mod k on equal paths): one
``iperf3 -s -1`` in the destination per path, bound to its address there, and one
client in the source per path, bound to its address, with that path's share of the
streams (``-P``), the scenario's ``-C`` and ``-t``, and ``-J`` for per-second,
per-stream figures. Pacing ``per-nic`` puts the pacing component's qdisc on every
source NIC for the run; ``per-socket`` gives every stream ``--fq-rate`` (its share of
the NIC's rate, on the payload scale). CPU: the iperf3 processes' user + system time
(RUSAGE_CHILDREN).
"""

from __future__ import annotations

import json
import resource
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reservoir import pacing
from reservoir.campaigns._scenario import Event as Planned
from reservoir.campaigns._scenario import Scenario
from reservoir.campaigns.errors import CampaignError
from reservoir.campaigns.results import Run
from reservoir.campaigns.run.site import LOOPBACK_ADDR, Paths, Place
from reservoir.campaigns.run.telemetry import (
    failover,
    intervals,
    iperf3_streams,
    scenario_record,
)
from reservoir.campaigns.run.timeline import PAYLOAD, Timeline, nic_rates, sampler
from reservoir.common.placement import placement
from reservoir.lab.peers import stop_process

__all__ = ["legs", "paced", "run_iperf3"]

BASE_PORT = 5301
SLACK_S = 30.0  # beyond -t before a client counts as hung
Json = dict[str, Any]
Progress = Callable[[float, float], None]  # (fraction done, bit/s so far)


class Iperf3Error(CampaignError):
    """An iperf3 process failed or did not finish."""


@dataclass
class Leg:
    """One client: a path (None on loopback), its addresses, its streams."""

    path: str | None
    src: str
    dst: str
    port: int
    streams: int


def legs(place: Paths, streams: int) -> list[Leg]:
    if place.loopback:
        return [Leg(None, LOOPBACK_ADDR, LOOPBACK_ADDR, BASE_PORT, streams)]
    on = placement([p.rate_bps for p in place.paths], streams)  # as the coordinator deals
    out = []
    for i, p in enumerate(place.paths):
        n = on.count(i)
        if n:
            out.append(Leg(p.name, p.src_addr, p.dst_addr, BASE_PORT + i, n))
    return out


def client_argv(leg: Leg, scenario: Scenario, nic_rate: float | None) -> list[str]:
    assert scenario.duration_s is not None
    argv = ["iperf3", "-c", leg.dst, "-B", leg.src, "-p", str(leg.port), "-P", str(leg.streams)]
    argv += ["-t", f"{scenario.duration_s:g}", "-i", "1", "-J", "-C", scenario.cc]
    if scenario.pacing == "per-socket" and nic_rate:
        argv += ["--fq-rate", str(int(nic_rate * PAYLOAD / leg.streams))]
    return argv


@contextmanager
def paced(place: Place, rates: dict[str, float], work: Path) -> Iterator[None]:
    """The source's NICs paced at ``rates`` (by name) for the ``with`` block."""
    applied = []
    state = work / "pacing"
    try:
        for name, rate in rates.items():
            applied.append(pacing.apply_nic(name, int(rate), netns=place.src_ns, state_dir=state))
        yield
    finally:
        for a in applied:
            with suppress(pacing.PacingError):
                pacing.remove_nic(a)


def _servers(
    place: Place, ls: list[Leg], procs: list[subprocess.Popen[bytes]]
) -> list[subprocess.Popen[bytes]]:
    """One ``iperf3 -s -1`` per leg, listening; each also added to ``procs``."""
    servers = []
    for leg in ls:
        argv = ["iperf3", "-s", "-1", "-B", leg.dst, "-p", str(leg.port)]
        servers.append(
            place.lab.run(
                place.destination, argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
        procs.append(servers[-1])
    for leg in ls:
        _await_listen(place, leg.port)
    return servers


def _await_listen(place: Place, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = place.lab.exec(place.destination, ["ss", "-Hltn", f"sport = :{port}"]).stdout
        if out.strip():
            return
        time.sleep(0.05)
    raise Iperf3Error(f"iperf3 -s on port {port} not listening after {timeout:g} s")


def _cpu_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _wait(
    clients: list[subprocess.Popen[bytes]], timeline: Timeline, scenario: Scenario, tick: Progress
) -> None:
    assert scenario.duration_s is not None
    deadline = time.monotonic() + scenario.duration_s + SLACK_S
    while any(c.poll() is None for c in clients):
        if time.monotonic() > deadline:
            raise Iperf3Error(f"iperf3 did not finish within -t {scenario.duration_s:g} s + 30 s")
        timeline.poll()
        elapsed = time.time() - timeline.started
        tick(min(1.0, elapsed / scenario.duration_s), 0.0)
        time.sleep(0.2)


def run_iperf3(
    place: Place,
    scenario: Scenario,
    *,
    repetition: int,
    events: tuple[Planned, ...],
    work: Path,
    tick: Progress,
) -> Run:
    """One repetition of an iperf3 scenario; raises on failure (the runner records it).
    Each client's JSON goes to a file in ``work`` (a pipe could fill up and stall it)."""
    rates = nic_rates(place, scenario)
    ls = legs(place, scenario.streams)
    timeline = Timeline(place, events)
    outputs = [work / f"iperf3-{i}.json" for i in range(len(ls))]
    procs: list[subprocess.Popen[bytes]] = []
    link_sampler = sampler(place)
    with ExitStack() as stack:
        stack.callback(_stop_all, procs)
        stack.callback(timeline.restore)
        stack.enter_context(paced(place, rates if scenario.pacing == "per-nic" else {}, work))
        servers = _servers(place, ls, procs)
        cpu0 = _cpu_children()
        if link_sampler is not None:
            stack.enter_context(link_sampler)
        started = timeline.start()
        offsets, clients = [], []
        for leg, out in zip(ls, outputs, strict=True):
            offsets.append(time.time() - started)
            argv = client_argv(leg, scenario, rates.get(leg.path or ""))
            with open(out, "wb") as f:
                clients.append(place.lab.run(place.source, argv, stdout=f))
            procs.append(clients[-1])
        _wait(clients, timeline, scenario, tick)
        seconds = time.time() - started
        for s in servers:
            s.wait(10)
        cpu = _cpu_children() - cpu0
    docs = [_document(out, c.returncode) for out, c in zip(outputs, clients, strict=True)]
    run = Run(
        scenario_record(scenario),
        repetition,
        started,
        seconds,
        0,
        0.0,
        cpu,
        events=list(timeline.fired),
    )
    _fill(run, docs, offsets, ls)
    if link_sampler is not None:
        run.failover = failover(link_sampler.bins(), run.events, started)
    return run


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        stop_process(p)


def _document(path: Path, returncode: int | None) -> Json:
    out = path.read_bytes()
    try:
        doc: Json = json.loads(out)
    except json.JSONDecodeError as e:
        raise Iperf3Error(f"iperf3 printed no JSON (exit {returncode}): {out[:300]!r}") from e
    if "error" in doc:
        raise Iperf3Error(f"iperf3: {doc['error']}")
    return doc


def _fill(run: Run, docs: list[Json], offsets: list[float], ls: list[Leg]) -> None:
    """Bytes, goodput, streams and intervals from the clients' documents."""
    for i, (doc, off, leg) in enumerate(zip(docs, offsets, ls, strict=True)):
        run.streams += iperf3_streams(doc, off, leg.path, f"{leg.path or 'lo'}.{i}.")
        run.bytes += int(doc["end"]["sum_received"]["bytes"])
    duration = max(float(d["end"]["sum_received"]["seconds"]) for d in docs)
    run.goodput_bps = run.bytes * 8 / duration if duration > 0 else 0.0
    run.intervals = intervals(run.streams)
