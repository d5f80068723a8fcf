"""The start of a copy, cold and warm: time to first byte, time to 90% of the bottleneck.

    python -m reservoir.lab.bench_start [--spec FILE] [--size 256M] [--streams 8] [--gap 5]
                                        [--congestion cubic] [--verify receipt]

A lab from the spec (default config/lab/lfn-2x500m-100ms.toml: hosts src and dst, links
l1 and l2 of 500 Mbit/s, 100 ms RTT). In host dst, ``reservoir target serve`` on both
links' portals with one LUN file; in host src, an agent (``reservoir agent serve``) whose
volume is a SIZE source file of random data. From inside src, through the agent's API,
the bench asks for copies of the source to the LUN over both links (``paths``), one
after the other, ``--gap`` seconds apart (idle: longer than TCP's retransmission timeout):

- cold: the agent's first copy: its sessions connect and log in, and their windows
  start from TCP's initial window;
- warm: the next copy: it takes the first one's sessions from the agent's pool;
- warm, idle restart: the same with ``net.ipv4.tcp_slow_start_after_idle = 1`` (the
  kernel's default) in src, which shrinks an idle connection's window back (a
  congestion control that is not BBR: the kernel leaves BBR's window alone; see
  ``--congestion cubic``).

For each, from the request: the first write (the engine's ``first_write``) and the first
data at dst (its links' rx counters, every 2 ms, from inside dst); from that first data,
the end of the first round trip long window in which dst received at 90% of the links'
rates (a window of one RTT: a sender fills it so only with 90% of the path's BDP in
flight, where a burst of a small window can fill a shorter one at line rate; so 0.9 RTT,
the first window 90% full of the copy, is the least it can be). In seconds and in
RTTs, with the agent's phase lines of the copy. The issue's target: a warm copy at 90%
within 3 RTTs of its first byte.

A benchmark, not a test: it prints figures and exits 0 unless something failed (1) or
the LUN differs from the source (2).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from reservoir.lab import netns
from reservoir.lab._lfn_copy import LINKS, Net, Target
from reservoir.lab._start_sampling import RxSampler, start_of
from reservoir.lab.bench_copy import Source, file_digest, make_lun, parse_size, write_source
from reservoir.lab.coord_site import SRC_PORTS, AgentProc, inside, site_credentials
from reservoir.lab.errors import LabError
from reservoir.lab.lfn_sampling import link_devices
from reservoir.lab.network import Lab
from reservoir.lab.peers import PeerError
from reservoir.lab.spec import Spec, SpecError, load
from reservoir.shipped import config_dir

DEFAULT_SPEC = config_dir() / "lab/lfn-2x500m-100ms.toml"
MiB = 1 << 20
EXTENT = 4 * MiB
IDLE_RESTART = "net.ipv4.tcp_slow_start_after_idle"
PHASE = re.compile(r"reservoir\.copy: copy to \S+: (.* at [0-9.]+ s)$")
TIMEOUT = 300.0
Json = dict[str, Any]


class StartBenchError(LabError):
    """The agent refused a request or a copy failed."""


@dataclass(frozen=True)
class Line:
    """The emulated path: its round trip (s) and its bottleneck (bytes per second)."""

    rtt: float
    rate: float

    @classmethod
    def of(cls, spec: Spec) -> Line:
        links = [spec.link(k) for k in LINKS]
        rtt = 2 * max(link.delay_ms for link in links) / 1000
        return cls(rtt, sum(link.rate_mbit for link in links) * 1e6 / 8)

    def rtts(self, seconds: float | None) -> str:
        if seconds is None:
            return "never"
        return f"{seconds:.3f} s ({seconds / self.rtt:.1f} RTT)"


@dataclass
class Run:
    name: str
    asked: float
    done: Json
    first_byte: float | None = None  # s after the request: data at dst
    to_90: float | None = None  # s after the first byte: 90% of the bottleneck

    @property
    def summary(self) -> Json:
        found: Json = self.done.get("summary") or {}
        return found


def ask(c: httpx.Client, body: Json) -> tuple[float, Json]:
    asked = time.monotonic()
    r = c.post("/copies", json=body)
    if r.status_code != 201:
        raise StartBenchError(f"POST /copies: {r.status_code} {r.text[:300]}")
    return asked, wait(c, str(r.json()["id"]))


def wait(c: httpx.Client, copy_id: str) -> Json:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        data: Json = c.get(f"/copies/{copy_id}").json()
        if data["state"] == "completed":
            return data
        if data["state"] == "failed":
            raise StartBenchError(f"copy {copy_id} failed: {data['last_error']}")
        time.sleep(0.05)
    raise StartBenchError(f"copy {copy_id} not done after {TIMEOUT:g} s")


def copy_body(src: Source, net: Net, args: argparse.Namespace) -> Json:
    paths = [f"{net.src[k]}={net.portal(k)}" for k in LINKS]
    body = {
        "source": str(src.path.resolve()),
        "dest": net.url(),
        "streams": args.streams,
        "extent_size": EXTENT,
        "paths": paths,
        "verification": args.verify,
    }
    return body if args.congestion is None else {**body, "congestion": args.congestion}


@dataclass
class Phases:
    """The agent's log lines of where a copy is ("copy to ...: flushed at 1.23 s"), as
    they come."""

    log: Path
    offset: int = 0

    def new(self) -> list[str]:
        text = self.log.read_text(errors="replace")
        lines, self.offset = text[self.offset :].splitlines(), len(text)
        return [m.group(1) for ln in lines if (m := PHASE.search(ln))]


@dataclass
class Bench:
    """What every copy of the bench goes through."""

    client: httpx.Client
    body: Json
    rx: RxSampler
    line: Line
    phases: Phases


def measure(name: str, b: Bench) -> Run:
    asked, done = ask(b.client, b.body)
    time.sleep(0.05)  # the last samples of the copy
    start = start_of(list(b.rx.samples), asked, b.line.rate, b.line.rtt)
    run = Run(name, asked, done)
    if start.first_byte is not None:
        run.first_byte = start.first_byte - asked
        if start.at_90 is not None:
            run.to_90 = start.at_90 - start.first_byte
    report(run, b.line)
    print("  agent: " + "; ".join(b.phases.new()), flush=True)
    return run


def report(run: Run, line: Line) -> None:
    s = run.summary
    seconds = s.get("elapsed") or 0.0
    mbit = s.get("copied_bytes", 0) * 8 / seconds / 1e6 if seconds else 0.0
    print(f"{run.name}:", flush=True)
    print(f"  first write      {line.rtts(s.get('first_write'))} after the request (engine)")
    print(f"  first data at dst {line.rtts(run.first_byte)} after the request")
    print(f"  90% of {line.rate * 8 / 1e6:.0f} Mbit/s  {line.rtts(run.to_90)} after its first data")
    print(
        f"  {s.get('copied_bytes', 0) / MiB:.0f} MiB in {seconds:.2f} s ({mbit:.0f} Mbit/s), "
        f"verified {s.get('verified')}; sessions {s.get('sessions_opened')} logged in, "
        f"{s.get('sessions_reused')} warm",
        flush=True,
    )


def check_agent(c: httpx.Client) -> None:
    """The agent runs this tree's code (a pool of warm sessions) on a tuned host."""
    info = c.get("/info").json()
    if info.get("warm_sessions") is None:
        raise StartBenchError("the agent keeps no warm sessions (an older reservoir on the path?)")
    print(
        f"  agent up: congestion control {info['tcp_congestion_control']} by default, "
        f"tcp_slow_start_after_idle {info['tcp_slow_start_after_idle']}"
    )


def runs(b: Bench, lab: Lab, gap: float) -> list[Run]:
    """Cold, warm, and warm with the kernel's idle restart, ``gap`` s apart."""
    print(f"RTT {b.line.rtt * 1000:.0f} ms, bottleneck {b.line.rate * 8 / 1e6:.0f} Mbit/s")
    done = [measure("cold", b)]
    time.sleep(gap)
    done.append(measure("warm", b))
    netns.sysctl(lab.ns("src"), IDLE_RESTART, "1")
    try:
        time.sleep(gap)
        done.append(measure("warm, idle restart", b))
    finally:
        netns.sysctl(lab.ns("src"), IDLE_RESTART, "0")
    warm = done[1].to_90
    verdict = "met" if warm is not None and warm <= 3 * b.line.rtt else "NOT met"
    print(f"target (warm copy at 90% within 3 RTT of its first byte): {verdict}")
    return done


def run_all(args: argparse.Namespace, work: Path) -> int:
    spec = load(args.spec)
    print(f"spec {args.spec}; {args.size / MiB:.0f} MiB a copy; {args.streams} streams")
    with Lab(spec) as lab:
        net = Net.of(lab.spec)
        src = write_source(work / "source.img", args.size, 0)
        lun = make_lun(work / "lun.img", args.size)
        agent = AgentProc(
            lab, "src", "l1", net.src["l1"], SRC_PORTS["l1"], work, site_credentials(work), src.path
        )
        devices = list(link_devices(lab.ns("dst"), net.dst).values())
        with Target(lab, net, lun, work / "target.log"), inside(lab.ns("src")):
            agent.start()
            try:
                headers = {"Authorization": f"Bearer {agent.token}"}
                with (
                    httpx.Client(base_url=f"{agent.url}/api/v1", headers=headers) as c,
                    RxSampler(lab.ns("dst"), devices) as rx,
                ):
                    check_agent(c)
                    body = copy_body(src, net, args)
                    phases = Phases(work / f"agent-{agent.name}.log")
                    done = runs(Bench(c, body, rx, Line.of(spec), phases), lab, args.gap)
            finally:
                agent.stop()
    same = file_digest(lun) == src.digest
    print(f"LUN {'equal to' if same else 'DIFFERS from'} the source")
    return 0 if same and all(r.summary.get("verified") for r in done) else 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    parser.add_argument("--size", type=parse_size, default=256 * MiB, help="default 256M")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--gap", type=float, default=5.0, help="idle seconds between copies")
    parser.add_argument(
        "--congestion", help="the copies' TCP congestion control (default: the host's)"
    )
    parser.add_argument(
        "--verify",
        choices=("storage", "receipt"),
        default="storage",
        help="how the copies verify (receipt: armed in the probe's round trip when warm)",
    )
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="reservoir-bench-start.", dir=args.dir) as tmp:
        try:
            return run_all(args, Path(tmp))
        except (PeerError, LabError, SpecError, StartBenchError, httpx.HTTPError) as e:
            print(f"bench_start: {e}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
