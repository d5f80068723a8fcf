"""Running a campaign: every scenario of its matrix (or quick subset), every repetition,
on the lab it describes, into an output folder.

The lab is built once per loss value (the matrix's order puts loss first); inside it
the repetitions go round the scenarios (run 1 of every scenario, then run 2, ...) so
that a reservoir run and its iperf3 baseline are close in time. Reservoir runs need a
site (agents and a coordinator, a source volume of the scenario's size): one at a time,
started when the size first changes. gridftp and xrdcp runs send the site's source when
it has their size, else a source of their own (``_peer_run.PeerSources``).

The output folder gets ``results.json`` (a :class:`CampaignRun`, rewritten after every
run, so an interrupted campaign keeps what it measured), ``progress.json``
(_progress.py), ``log.txt``, ``report.html`` (one self-contained page) at the end, and
``work/`` with the processes' logs. A run that fails is recorded with its error and
the campaign goes on; :class:`Cancelled` (SIGTERM) or KeyboardInterrupt stop it after
the lab is torn down.
"""

from __future__ import annotations

import functools
import os
import platform
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from reservoir.campaigns._estimate import run_seconds
from reservoir.campaigns._scenario import PEERS, Scenario
from reservoir.campaigns._spec import Campaign, CampaignFileError
from reservoir.campaigns.report import report_html
from reservoir.campaigns.results import (
    CampaignRun,
    LabLateness,
    Machine,
    PathInfo,
    Run,
    Topology,
    run_jain,
)
from reservoir.campaigns.run.iperf3_remote import run_iperf3_remote
from reservoir.campaigns.run.iperf3_run import run_iperf3
from reservoir.campaigns.run.peer_run import PeerSources, run_peer
from reservoir.campaigns.run.progress import Progress
from reservoir.campaigns.run.remote import Remote, connect
from reservoir.campaigns.run.reservoir_run import run_reservoir
from reservoir.campaigns.run.site import Place, Site, place, site
from reservoir.campaigns.run.telemetry import scenario_record
from reservoir.lab.errors import LabError

__all__ = ["Cancelled", "plan", "run_campaign"]

CC_AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


class Cancelled(BaseException):
    """The campaign was asked to stop (SIGTERM)."""


def plan(campaign: Campaign, quick: bool) -> list[tuple[Scenario, int]]:
    """(scenario, repetition from 1) in the order they run."""
    scenarios = campaign.quick() if quick else campaign.scenarios()
    reps = campaign.quick_repetitions if quick else campaign.repetitions
    out: list[tuple[Scenario, int]] = []
    for loss in dict.fromkeys(s.loss for s in scenarios):
        group = [s for s in scenarios if s.loss == loss]
        out += [(s, rep) for rep in range(1, reps + 1) for s in group]
    return out


def machine() -> Machine:
    try:
        cc = CC_AVAILABLE.read_text().split()
    except OSError:
        cc = []
    return Machine(os.cpu_count() or 1, platform.release(), cc)


def topology_record(campaign: Campaign, remote: Remote | None = None) -> Topology:
    t = campaign.topology
    bottleneck = None if t.bottleneck_mbit is None else t.bottleneck_mbit * 1e6
    if remote is not None:
        paths = [PathInfo(p.name, p.rate_bps, p.rtt_ms, 0.0) for p in remote.paths]
        return Topology("real", None, bottleneck, paths)
    if t.kind == "loopback" or t.lab is None:
        return Topology("loopback" if t.kind == "loopback" else "real", None, None)
    paths = []
    for name in t.paths:
        link = t.lab.link(name)
        paths.append(PathInfo(name, link.rate_mbit * 1e6, 2 * link.delay_ms, link.loss))
    return Topology("lab", t.lab_file, bottleneck, paths)


@dataclass
class _Sites:
    """One site at a time, replaced when a run needs another volume size; the peers'
    sources."""

    place: Place
    work: Path
    size: int | None = None
    current: Site | None = None
    stack: ExitStack = field(default_factory=ExitStack)
    peers: PeerSources | None = None

    def get(self, size: int) -> Site:
        if self.current is None or self.size != size:
            self.close()
            self.current = self.stack.enter_context(site(self.place, self.work, size))
            self.size = size
        return self.current

    def close(self) -> None:
        self.stack.close()
        self.current = self.size = None
        if self.peers is not None:
            self.peers.close()

    def peer_sources(self) -> PeerSources:
        if self.peers is None:
            self.peers = PeerSources(self.work)
        return self.peers

    def run(self, sc: Scenario, rep: int, work: Path, *, campaign: Campaign, prog: Progress) -> Run:
        """One run in the lab (:meth:`_run`), with what its delay lines released late
        meanwhile."""
        before = self._late()
        run = self._run(sc, rep, work, campaign=campaign, prog=prog)
        after = self._late() if before is not None else None
        if before is not None and after is not None:
            run.lab_late = _late_between(before, after)
        return run

    def _late(self) -> dict[str, tuple[int, int]] | None:
        """Per delay line and direction: (frames released late so far, the latest of
        them in µs since the counters were asked before); None without delay lines,
        or when one did not answer."""
        lab, late = self.place.lab, {}
        try:
            for link in list(lab.state.lines):
                for way, counters in lab.line_counters(link).items():
                    late[f"{link} {way}"] = (counters["late_frames"], counters["max_late_us"])
        except (LabError, KeyError):
            return None
        return late or None

    def _run(
        self, sc: Scenario, rep: int, work: Path, *, campaign: Campaign, prog: Progress
    ) -> Run:
        """One run: iperf3, gridftp and xrdcp in the lab's namespaces, reservoir on this
        site."""
        events = campaign.events
        if sc.tool == "iperf3":
            work.mkdir(parents=True, exist_ok=True)
            return run_iperf3(
                self.place, sc, repetition=rep, events=events, work=work, tick=prog.tick
            )
        assert sc.size_bytes is not None
        if sc.tool in PEERS:
            work.mkdir(parents=True, exist_ok=True)
            site = self.current.source if self.current and self.size == sc.size_bytes else None
            sources = self.peer_sources()
            return run_peer(
                self.place, sc, sources.source(sc.size_bytes, site), sources,
                repetition=rep, events=events, work=work, tick=prog.tick,
            )  # fmt: skip
        return run_reservoir(self.get(sc.size_bytes), sc, rep, campaign.events, prog.tick)


def _late_between(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> LabLateness:
    """What the delay lines released late between two readings of their counters."""
    frames = sum(n - before.get(way, (0, 0))[0] for way, (n, _) in after.items())
    return LabLateness(max(0, frames), max(us for _, us in after.values()) / 1000)


def _failed(sc: Scenario, rep: int, started: float, exc: Exception) -> Run:
    text = str(exc) or type(exc).__name__
    return Run(scenario_record(sc), rep, started, time.time() - started, 0, 0.0, 0.0, error=text)


def _groups(runs: list[tuple[Scenario, int]]) -> Iterator[list[tuple[Scenario, int]]]:
    """Consecutive runs with the same loss (one lab each)."""
    group: list[tuple[Scenario, int]] = []
    for item in runs:
        if group and group[-1][0].loss != item[0].loss:
            yield group
            group = []
        group.append(item)
    if group:
        yield group


def _run_remote(remote: Remote, sc: Scenario, rep: int, prog: Progress, _work: Path) -> Run:
    if sc.tool == "iperf3":
        return run_iperf3_remote(remote, sc, rep, prog.tick)
    if sc.tool in PEERS:  # the campaign's check refuses them first
        raise CampaignFileError(f"{sc.tool} runs need a lab or loopback topology")
    return run_reservoir(remote, sc, rep, (), prog.tick)


@dataclass
class _Record:
    """The campaign's results as the runs come, saved after each."""

    result: CampaignRun
    out: Path
    prog: Progress
    index: int = 0

    def run(self, sc: Scenario, rep: int, one: Callable[[Path], Run]) -> None:
        self.index += 1
        self.prog.begin(sc.name, rep)
        started = time.time()
        work = self.out / "work" / f"{self.index:03d}-{sc.name}-r{rep}"
        try:
            run = one(work)
        except Exception as exc:  # a failed run is a result; the campaign goes on
            run = _failed(sc, rep, started, exc)
        if run.ok:
            run.jain = run_jain(run)
        self.result.runs.append(run)
        self.result.save(self.out / "results.json")
        self.prog.end(run)


def run_campaign(
    campaign: Campaign,
    out: Path,
    prog: Progress,
    quick: bool = False,
    coordinator: tuple[str, str | None] | None = None,
) -> CampaignRun:
    """Runs the campaign into ``out`` (which must exist); the results, also saved.
    ``coordinator`` (URL, token) is where a real topology is registered."""
    runs = plan(campaign, quick)
    result = CampaignRun(
        campaign.name,
        f"{campaign.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}",
        time.time(),
        None,
        machine(),
        topology_record(campaign),
    )
    result.save(out / "results.json")
    record = _Record(result, out, prog)
    if campaign.topology.kind == "real":
        if coordinator is None:
            raise CampaignFileError("topology.real: give the coordinator it is registered in")
        with connect(campaign, *coordinator) as remote:
            result.topology = topology_record(campaign, remote)
            for sc, rep in runs:
                record.run(sc, rep, functools.partial(_run_remote, remote, sc, rep, prog))
    for group in [] if campaign.topology.kind == "real" else _groups(runs):
        spec = campaign.topology.spec_for(group[0][0].loss)
        with place(campaign.topology, spec) as p, ExitStack() as stack:
            sites = _Sites(p, out / "work")
            stack.callback(sites.close)
            for sc, rep in group:
                one = functools.partial(sites.run, sc, rep, campaign=campaign, prog=prog)
                record.run(sc, rep, one)
    result.finished = time.time()
    result.save(out / "results.json")
    (out / "report.html").write_text(report_html(result))
    return result


def estimates(campaign: Campaign, quick: bool) -> list[float]:
    return [run_seconds(sc, campaign.topology) for sc, _ in plan(campaign, quick)]
