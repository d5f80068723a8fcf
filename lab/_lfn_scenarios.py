"""The copy scenarios of :mod:`reservoir.lab.bench_lfn`: paths, cut, mptcp, mptcp-cut,
kill; each returns a :class:`Row` of the summary table."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from reservoir.lab._lfn_copy import (
    LINKS,
    Net,
    Outcome,
    Target,
    path_event,
    start_copy,
    stream_lines,
)
from reservoir.lab.bench_copy import Source, file_digest, make_lun
from reservoir.lab.errors import LabError
from reservoir.lab.lfn_sampling import (
    Bin,
    LinkSampler,
    back_after,
    link_devices,
    lost_seconds,
    mean_rate,
    series_lines,
)
from reservoir.lab.network import Lab

CUT_AT, KILL_AT = 0.30, 0.40  # of the source, from src's tx counters (headers included)
OUTAGE, RESTART_AFTER, PRE_CUT = 8.0, 2.0, 3.0
UNCUT = {"cut": "paths", "mptcp-cut": "mptcp"}
STALL = 60.0  # a copy that sends nothing for this long is killed


@dataclass
class Row:
    name: str
    seconds: float | None = None
    mbit: float | None = None
    hash_ok: bool | None = None
    notes: str = ""
    peer_failed: bool = False


@dataclass
class Bench:
    args: argparse.Namespace
    lab: Lab
    net: Net
    src: Source
    work: Path
    devices: dict[str, str]
    iperf_mbit: float | None = None
    uncut: dict[str, float] = field(default_factory=dict)
    mptcp_refused: str | None = None  # None until set up; "" when it worked


def header(title: str) -> None:
    print(f"\n== {title}", flush=True)


class Plan(Protocol):
    events: dict[str, float]

    def poll(self, done: float) -> None: ...

    def finish(self) -> None: ...


@dataclass
class CutPlan:
    """Cut ``link`` at CUT_AT of the copy, restore it OUTAGE seconds later."""

    lab: Lab
    link: str = "l1"
    events: dict[str, float] = field(default_factory=dict)

    def poll(self, done: float) -> None:
        if "cut" not in self.events:
            if done >= CUT_AT:
                self.events["cut"] = time.time()
                self.lab.link_down(self.link)
        elif "restore" not in self.events and time.time() >= self.events["cut"] + OUTAGE:
            self.finish()

    def finish(self) -> None:
        if "cut" in self.events and "restore" not in self.events:
            self.events["restore"] = time.time()
            self.lab.link_up(self.link)


@dataclass
class KillPlan:
    """SIGKILL the target at KILL_AT of the copy, start it again RESTART_AFTER later."""

    target: Target
    pid: int = 0
    events: dict[str, float] = field(default_factory=dict)

    def poll(self, done: float) -> None:
        if "kill" not in self.events:
            if done >= KILL_AT:
                self.events["kill"] = time.time()
                self.pid = self.target.kill()
        elif "restart" not in self.events and time.time() >= self.events["kill"] + RESTART_AFTER:
            self.finish()

    def finish(self) -> None:
        if "kill" in self.events and "restart" not in self.events:
            time.sleep(max(0.0, self.events["kill"] + RESTART_AFTER - time.time()))
            self.target.start()
            self.events["restart"] = time.time()


def watch(
    b: Bench, copy_log: Path, argv: list[str], sampler: LinkSampler, plan: Plan | None
) -> Outcome:
    """Runs a copy to its end, polling the plan with the fraction sent so far."""
    copy = start_copy(b.lab, argv, copy_log)
    moved, last_move = 0, time.monotonic()
    while copy.proc.poll() is None:
        sent = sum(sampler.sent().values())
        if plan is not None:
            plan.poll(sent / b.src.size)
        if sent > moved + (1 << 20):
            moved, last_move = sent, time.monotonic()
        if time.monotonic() - last_move > STALL:
            print(f"  the copy sent nothing for {STALL:.0f} s: killed", flush=True)
            copy.proc.kill()
        time.sleep(0.05)
    if plan is not None:
        plan.finish()
    return copy.outcome()


def copy_argv(b: Bench, name: str, *, mptcp: bool, resume: bool = False) -> list[str]:
    argv = [str(b.src.path), b.net.url(), "--streams", str(b.args.streams)]
    argv += ["--mptcp"] if mptcp else b.net.path_args()
    argv += ["--telemetry", str(telemetry(b, name))]
    argv += ["--checkpoint", str(b.work / f"{name}.checkpoint.json")]
    return argv + (["--resume"] if resume else [])


def telemetry(b: Bench, name: str) -> Path:
    return b.work / f"{name}.telemetry.jsonl"


@contextmanager
def session(b: Bench, name: str, mptcp: bool) -> Iterator[tuple[Target, LinkSampler, Path]]:
    """A fresh LUN served in dst, src's links sampled; the LUN deleted afterwards."""
    lun = make_lun(b.work / f"{name}.lun", b.src.size)
    try:
        with (
            Target(b.lab, b.net, lun, b.work / f"{name}.target.log", mptcp) as target,
            LinkSampler(b.lab.ns("src"), b.devices) as sampler,
        ):
            yield target, sampler, lun
    finally:
        lun.unlink(missing_ok=True)


def check_lun(b: Bench, lun: Path) -> bool:
    digest = file_digest(lun)
    same = digest == b.src.digest
    print(f"  LUN xxh3-128 {digest} {'== source' if same else '!= source (MISMATCH)'}")
    return same


def print_rate(b: Bench, out: Outcome, sampler: LinkSampler) -> float:
    nbytes = out.figure(1) or b.src.size  # what this run copied (less after --resume)
    mbit = nbytes * 8 / out.seconds / 1e6
    vs = f"{mbit / b.iperf_mbit:.2f} x iperf3" if b.iperf_mbit else "no iperf3 baseline"
    print(
        f"  {nbytes / (1 << 30):.2f} GiB in {out.seconds:.1f} s: {mbit / 8:.1f} MB/s"
        f" = {mbit:.0f} Mbit/s, {mbit / 1000:.3f} of 1 Gbit/s, {vs}"
        f" (process wall time; the copy's own summary: {out.reported()})"
    )
    sent = ", ".join(f"{k} {v / 1e9:.2f} GB" for k, v in sampler.sent().items())
    print(f"  sent by src per link (tx counters, headers included): {sent}")
    return mbit


def copy_row(b: Bench, name: str, out: Outcome, sampler: LinkSampler, lun: Path) -> Row:
    for line in out.report_lines():
        print(f"  | {line}")
    if out.status != 0:
        print(f"  copy FAILED (exit {out.status}): {out.last_line()}", flush=True)
        return Row(name, out.seconds, peer_failed=True, notes=f"exit {out.status}")
    mbit = print_rate(b, out, sampler)
    return Row(name, out.seconds, mbit, check_lun(b, lun))


def copy_scenario(b: Bench, name: str, *, mptcp: bool, cut: bool) -> Row:
    with session(b, name, mptcp) as (_, sampler, lun):
        plan = CutPlan(b.lab) if cut else None
        argv = copy_argv(b, name, mptcp=mptcp)
        out = watch(b, b.work / f"{name}.copy.log", argv, sampler, plan)
        if mptcp and "refuses MPTCP" in out.output:
            print(f"  MPTCP refused: {out.last_line()}")
            return Row(name, notes=f"MPTCP refused: {out.last_line()[:50]}")
        row = copy_row(b, name, out, sampler, lun)
    if plan is None:
        b.uncut[name] = out.seconds
        print("  telemetry per stream:")
        print("\n".join(stream_lines(telemetry(b, name), b.net)) or "    (no stream records)")
    elif out.status == 0:
        row.notes = cut_figures(b, name, out, bins=sampler.bins(), events=plan.events, mptcp=mptcp)
    return row


def paths(b: Bench) -> Row:
    header(f"paths: reservoir copy --streams {b.args.streams} --path (l1) --path (l2)")
    return copy_scenario(b, "paths", mptcp=False, cut=False)


def cut(b: Bench) -> Row:
    header(f"cut: as paths; l1 down at ~{CUT_AT:.0%} of the copy, up {OUTAGE:.0f} s later")
    return copy_scenario(b, "cut", mptcp=False, cut=True)


def mptcp(b: Bench) -> Row:
    header(f"mptcp: reservoir copy --streams {b.args.streams} --mptcp to the l1 portal")
    return mptcp_scenario(b, "mptcp", cut=False)


def mptcp_cut(b: Bench) -> Row:
    header(f"mptcp-cut: as mptcp; l1 down at ~{CUT_AT:.0%}, up {OUTAGE:.0f} s later")
    return mptcp_scenario(b, "mptcp-cut", cut=True)


def mptcp_scenario(b: Bench, name: str, cut: bool) -> Row:
    if b.mptcp_refused is None:
        b.mptcp_refused = setup_mptcp(b)
    if b.mptcp_refused:
        print(f"  MPTCP refused by the kernel: {b.mptcp_refused}")
        return Row(name, notes=f"MPTCP refused: {b.mptcp_refused[:50]}")
    return copy_scenario(b, name, mptcp=True, cut=cut)


def setup_mptcp(b: Bench) -> str:
    """MPTCP limits in src and dst, dst's l2 address signalled; the reason if refused."""
    try:
        for host in ("src", "dst"):
            b.lab.exec(host, ["sysctl", "-q", "net.mptcp.enabled=1"])
            b.lab.exec(
                host, ["ip", "mptcp", "limits", "set", "subflow", "2", "add_addr_accepted", "2"]
            )
        dev = link_devices(b.lab.ns("dst"), {"l2": b.net.dst["l2"]})["l2"]
        b.lab.exec("dst", ["ip", "mptcp", "endpoint", "add", b.net.dst["l2"], "dev", dev, "signal"])
    except LabError as e:
        return str(e)
    print(f"  MPTCP: subflow 2 add_addr_accepted 2 in src and dst; dst signals {b.net.dst['l2']}")
    return ""


def _secs(value: float | None, origin: float | None) -> str:
    return "never" if value is None or origin is None else f"+{value - origin:.2f} s"


def cut_figures(
    b: Bench, name: str, out: Outcome, *, bins: list[Bin], events: dict[str, float], mptcp: bool
) -> str:
    at, restore = events.get("cut"), events.get("restore")
    if at is None or restore is None:
        print("  the copy ended before the cut")
        return "no cut"
    l1_pre, l2_pre = (mean_rate(bins, k, at - PRE_CUT, at) for k in LINKS)
    lost = lost_seconds(bins, at, at + OUTAGE, l2_pre)
    back = back_after(bins, "l1", restore, 0.1 * l1_pre)
    print(f"  cut at +{at - out.started:.2f} s of the copy; restored +{restore - at:.2f} s later")
    print(f"  before the cut ({PRE_CUT:.0f} s): l1 {l1_pre:.0f} Mbit/s, l2 {l2_pre:.0f} Mbit/s")
    print(f"  (a) aggregate throughput lost in the {OUTAGE:.0f} s after the cut: {lost:.2f} s")
    print("      (integral of max(0, l2_before - total) / l2_before)")
    fail, rec = path_figures(b, name, at, restore, mptcp)
    back_s = "never" if back is None else f"+{back:.2f} s"
    print(f"  (c) l1 carries > 10% of its pre-cut rate again {back_s} after link_up")
    sent_twice = out.figure(6)
    base = b.uncut.get(UNCUT[name])
    vs = f"{out.seconds / base:.2f} x uncut" if base else "no uncut run"
    diff = f" ({out.seconds - base:+.1f} s)" if base else ""
    print(f"  (d) sent twice {sent_twice} bytes; {out.seconds:.1f} s = {vs}{diff}")
    print("  per-link Mbit/s, 0.25 s bins, two a line (time of the first bin's end from the cut):")
    print("\n".join(series_lines(bins, at - 2.0, restore + 4.0, at)))
    return f"lost {lost:.2f} s; {fail}; l1 back {back_s}{', ' + rec if rec else ''}; {vs}"


def path_figures(b: Bench, name: str, at: float, restore: float, mptcp: bool) -> tuple[str, str]:
    if mptcp:
        print("  (b) no path records with --mptcp: one path, the subflows are the kernel's")
        return "no path records (mptcp)", ""
    tel = telemetry(b, name)
    failed = path_event(tel, b.net, "failed", "l1", at - 0.5)
    recovered = path_event(tel, b.net, "recovered", "l1", restore - 0.5)
    print(f"  (b) path l1 marked failed {_secs(failed, at)} after the cut")
    print(f"  (c) path l1 marked recovered {_secs(recovered, restore)} after link_up")
    return f"failed {_secs(failed, at)}", f"recovered {_secs(recovered, restore)}"


def kill(b: Bench) -> Row:
    header(f"kill: as paths; the target killed (-9) at ~{KILL_AT:.0%}, restarted 2 s later")
    with session(b, "kill", False) as (target, sampler, lun):
        plan = KillPlan(target)
        first = watch(b, b.work / "kill.copy.log", copy_argv(b, "kill", mptcp=False), sampler, plan)
        print_kill(plan, first)
        final = first
        if first.status != 0:
            argv = copy_argv(b, "kill", mptcp=False, resume=True)
            final = watch(b, b.work / "kill-resume.copy.log", argv, sampler, None)
            print(f"  resumed copy (--resume): exit {final.status}, {final.seconds:.1f} s")
        row = copy_row(b, "kill", final, sampler, lun)
    total = final.started + final.seconds - first.started
    row.seconds = total
    row.mbit = b.src.size * 8 / total / 1e6 if final.status == 0 else None
    skipped, twice = final.figure(4), final.figure(6)
    how = "survived" if first.status == 0 else f"exit {first.status}, resumed"
    print(
        f"  total {total:.1f} s from the first start; skipped {skipped} bytes from the"
        f" checkpoint, sent twice {twice} bytes"
    )
    row.notes = f"{how}; skipped {_mb(skipped)}, sent twice {_mb(twice)}"
    return row


def _mb(nbytes: int | None) -> str:
    return "?" if nbytes is None else f"{nbytes / 1e6:.0f} MB"


def print_kill(plan: KillPlan, first: Outcome) -> None:
    killed, restarted = plan.events.get("kill"), plan.events.get("restart")
    if killed is None or restarted is None:
        print("  the copy ended before the kill")
        return
    print(
        f"  target PID {plan.pid} killed (-9) at +{killed - first.started:.2f} s,"
        f" restarted (ready) {restarted - killed:.2f} s later"
    )
    survived = "survived on its own" if first.status == 0 else "failed"
    print(
        f"  first copy {survived}: exit {first.status} after {first.seconds:.1f} s;"
        f" last line: {first.last_line()[:300]}"
    )


def summary_table(rows: list[Row]) -> None:
    header("summary (seconds: process wall time; 1 Gbit/s = both links)")
    print(
        f"  {'scenario':<10} {'seconds':>7} {'MB/s':>6} {'of 1G':>6} {'vs iperf3':>9} "
        f"{'hash':>5}  figures"
    )
    iperf = next((r.mbit for r in rows if r.name == "baseline"), None)
    for r in rows:
        secs = f"{r.seconds:.1f}" if r.seconds is not None else "-"
        mb = f"{r.mbit / 8:.1f}" if r.mbit else "-"
        share = f"{r.mbit / 1000:.3f}" if r.mbit else "-"
        vs = f"{r.mbit / iperf:.2f}" if r.mbit and iperf else "-"
        ok = {None: "-", True: "ok", False: "DIFF"}[r.hash_ok]
        fail = "PEER FAILED; " if r.peer_failed else ""
        print(f"  {r.name:<10} {secs:>7} {mb:>6} {share:>6} {vs:>9} {ok:>5}  {fail}{r.notes}")
