"""The equalizer experiment: 16 streams over two paths of different RTT that share one
bottleneck, with the equalizer off and on, and iperf3 on the same paths as a baseline.

    python -m reservoir.lab.bench_equalizer [--size 1536M] [--streams 16] [--runs 1]

The lab is config/lab/equalizer-60-200ms.toml: host src reaches dst over l1 (60 ms
RTT) or l2 (200 ms RTT), both through router r, whose TBF towards dst (500 Mbit/s)
is the queue both paths share. In src: the coordinator and a source agent (a file of
SIZE random bytes); in dst: a destination agent whose builtin target serves one LUN
on both of dst's addresses. Both links are registered with the same ``bottleneck``,
so the equalizer evens out all 16 streams together.

Each run: iperf3 with STREAMS/2 streams to each address at once (memory to memory),
then a transfer with the equalizer off, then one with it on (pacing off in both, so
the equalizer alone makes the difference). Figures per scenario, over the middle 60%
of the run (when every stream is carrying data): aggregate goodput against the
bottleneck's payload rate (500 Mbit/s x 1448/1514), the mean rate of the streams on
each path, Jain's index across all streams, and for the transfers the number of cap
decisions and whether the LUN equals the source.

A benchmark, not a test: it prints figures and exits 0 unless something failed (1) or
a LUN differs from its source (2).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from reservoir.common.fairness import jain
from reservoir.lab.bench_copy import Source, file_digest, make_lun, parse_size, write_source
from reservoir.lab.coord_site import AgentProc, Coordinator, inside, site_credentials
from reservoir.lab.errors import LabError
from reservoir.lab.network import Lab
from reservoir.lab.peers import PeerError, stop_process
from reservoir.lab.spec import SpecError, load
from reservoir.shipped import config_dir

SPEC = config_dir() / "lab/equalizer-60-200ms.toml"
MiB = 1 << 20
BOTTLENECK_BPS = 500e6
PAYLOAD = BOTTLENECK_BPS * 1448 / 1514
SRC_L1, SRC_L2 = "10.206.1.1", "10.206.2.1"
DST1, DST2 = "10.206.8.2", "10.206.9.2"  # dst's addresses reached over l1 and l2
IQN = "iqn.2026-11.org.reservoir:equalizer"
WINDOW = (0.2, 0.8)  # the part of a run the figures cover
TIMEOUT = 900.0
Json = dict[str, Any]


class EqualizerBenchError(LabError):
    """The API refused a request or a transfer failed."""


@dataclass
class Row:
    name: str
    seconds: float = 0.0
    aggregate: float = 0.0  # bit/s over the window
    per_path: dict[str, float] = field(default_factory=dict)  # mean bit/s of a stream
    jain: float = 0.0
    decisions: int | None = None
    hash_ok: bool | None = None


def ok(r: httpx.Response) -> Any:
    if r.status_code not in (200, 201):
        raise EqualizerBenchError(
            f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text}"
        )
    return r.json()


def window_means(samples: list[tuple[float, str, float]]) -> dict[str, float]:
    """Mean rate per stream over the middle of the run, from (time, stream, bit/s)."""
    first, last = min(t for t, _, _ in samples), max(t for t, _, _ in samples)
    lo, hi = first + WINDOW[0] * (last - first), first + WINDOW[1] * (last - first)
    rates: dict[str, list[float]] = {}
    for t, stream, bps in samples:
        if lo <= t <= hi:
            rates.setdefault(stream, []).append(bps)
    return {s: statistics.fmean(v) for s, v in rates.items()}


def row_of(name: str, seconds: float, means: dict[str, float], path_of: dict[str, str]) -> Row:
    per_path: dict[str, list[float]] = {}
    for stream, bps in means.items():
        per_path.setdefault(path_of[stream], []).append(bps)
    return Row(
        name,
        seconds,
        sum(means.values()),
        {p: statistics.fmean(v) for p, v in sorted(per_path.items())},
        jain(means.values()),
    )


# ---------------------------------------------------------------- iperf3


def iperf3(lab: Lab, streams: int, seconds: int) -> Row:
    """STREAMS/2 iperf3 streams to each of dst's addresses at once."""
    half = streams // 2
    servers = [
        lab.run(
            "dst",
            ["iperf3", "-s", "-1", "-B", a],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for a in (DST1, DST2)
    ]
    try:
        time.sleep(0.5)
        clients = [
            lab.run(
                "src",
                ["iperf3", "-c", a, "-B", b, "-P", str(half), "-t", str(seconds), "-J"],
                stdout=subprocess.PIPE,
                text=True,
            )
            for a, b in ((DST1, SRC_L1), (DST2, SRC_L2))
        ]
        reports = [json.loads(c.communicate(timeout=seconds + 60)[0]) for c in clients]
    finally:
        for s in servers:
            stop_process(s)
    samples: list[tuple[float, str, float]] = []
    path_of: dict[str, str] = {}
    for path, report in zip(("l1", "l2"), reports, strict=True):
        for interval in report["intervals"]:
            for st in interval["streams"]:
                name = f"{path}/{st['socket']}"
                path_of[name] = path
                samples.append((float(st["end"]), name, float(st["bits_per_second"])))
    return row_of("iperf3", float(seconds), window_means(samples), path_of)


# ---------------------------------------------------------------- the site


@dataclass
class Site:
    lab: Lab
    work: Path
    size: int
    source: Source | None = None
    agents: list[AgentProc] = field(default_factory=list)
    coordinator: Coordinator | None = None

    def start(self) -> Coordinator:
        creds = site_credentials(self.work)  # the coordinator's, started below
        self.source = write_source(self.work / "source.img", self.size, 0)
        lun = make_lun(self.work / "lun.img", self.size)
        src = AgentProc(
            self.lab, "src", "l1", SRC_L1, 8471, self.work, creds, self.source.path, cwnd_caps="bpf"
        )
        dst = AgentProc(
            self.lab, "dst", "b", DST1, 8473, self.work, creds, lun, IQN, portals=(DST1, DST2)
        )
        self.agents = [src, dst]
        for a in self.agents:
            a.start()
        self.coordinator = Coordinator(self.lab, SRC_L1, self.work)
        self.coordinator.start()
        return self.coordinator

    def stop(self) -> None:
        if self.coordinator is not None:
            self.coordinator.stop()
        for a in self.agents:
            a.stop()

    def fresh_lun(self) -> None:
        with open(self.agents[1].data, "r+b") as f:
            f.truncate(0)
            f.truncate(self.size)

    def register(self, c: httpx.Client) -> Json:
        src, dst = self.agents
        nics = {
            "src": [
                {"name": "l1", "address": SRC_L1, "speed_bps": 10**10},
                {"name": "l2", "address": SRC_L2, "speed_bps": 10**10},
            ],
            "dst": [
                {"name": "via-l1", "address": DST1, "speed_bps": 10**10},
                {"name": "via-l2", "address": DST2, "speed_bps": 10**10},
            ],
        }
        ids = {}
        for a in (src, dst):
            body = a.registration(self.size)
            body["nics"] = nics[a.role]
            if a.role == "dst":
                body["volumes"][0]["portal"] = f"{DST1}:3260"
            ids[a.role] = ok(c.post("/agents", json=body))["id"]
        sets = {}
        for role in ("src", "dst"):
            members = [{"agent_id": ids[role], "volume": "v0"}]
            body = {"name": f"{role}-set", "members": members, "stripe_unit": 4 * MiB}
            sets[role] = ok(c.post("/volume-sets", json=body))["id"]
        links = []
        for name, rtt in (("l1", 60.0), ("l2", 200.0)):
            body = {
                "name": name,
                "agent_a": ids["src"],
                "nic_a": name,
                "agent_b": ids["dst"],
                "nic_b": f"via-{name}",
                "capacity_bps": int(BOTTLENECK_BPS),
                "rtt_ms": rtt,
                "bottleneck": "r-to-dst",
            }
            links.append(ok(c.post("/links", json=body))["id"])
        return {"source": sets["src"], "destination": sets["dst"], "paths": links}


def await_done(c: httpx.Client, tid: str) -> Json:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        t: Json = ok(c.get(f"/transfers/{tid}"))
        if t["state"] == "completed":
            return t
        if t["state"] in ("failed", "cancelled"):
            c.post(f"/transfers/{tid}/cancel")  # a failed one holds the destination
            raise EqualizerBenchError(f"transfer {t['state']}: {t['last_error']}")
        time.sleep(0.2)
    c.post(f"/transfers/{tid}/cancel")  # the next run writes the same destination
    raise EqualizerBenchError(f"transfer {tid} not completed after {TIMEOUT:.0f} s")


def transfer(c: httpx.Client, site: Site, body: Json, equalizer: bool) -> Row:
    site.fresh_lun()
    start = time.monotonic()
    tid = ok(c.post("/transfers", json={**body, "equalizer": equalizer}))["id"]
    await_done(c, tid)
    seconds = time.monotonic() - start
    rows: list[Json] = ok(c.get(f"/transfers/{tid}/streams", params={"limit": 10_000}))
    samples = [(r["time"], r["stream"], r["bits_per_second"]) for r in rows if r["bits_per_second"]]
    # stream i of the copy runs on path i mod 2: even ones on l1, odd ones on l2
    path_of = {r["stream"]: f"l{int(r['stream']) % 2 + 1}" for r in rows}
    row = row_of(
        f"equalizer {'on' if equalizer else 'off'}", seconds, window_means(samples), path_of
    )
    history: list[Json] = ok(c.get(f"/transfers/{tid}/events"))
    row.decisions = sum(e["kind"] == "equalizer" for e in history)
    assert site.source is not None
    row.hash_ok = file_digest(site.agents[1].data) == site.source.digest
    return row


# ---------------------------------------------------------------- report


def print_row(r: Row) -> None:
    paths = ", ".join(f"{p} {v / 1e6:.1f}" for p, v in r.per_path.items())
    extra = ""
    if r.decisions is not None:
        extra = f"; {r.decisions} cap decisions; LUN {'equal' if r.hash_ok else 'DIFFERS'}"
    print(
        f"  {r.name:<14} {r.seconds:6.1f} s  aggregate {r.aggregate / 1e6:6.1f} Mbit/s"
        f" ({r.aggregate / PAYLOAD:.3f} of the bottleneck)  per stream by path [{paths}]"
        f"  Jain {r.jain:.3f}{extra}",
        flush=True,
    )


def summary(rows: list[Row]) -> None:
    print("\n== summary (figures over the middle 60% of each run)")
    print(f"  {'scenario':<14} {'aggregate':>10} {'of bneck':>8} {'l1/l2':>6} {'Jain':>6}")
    for r in rows:
        ratio = r.per_path.get("l1", 0) / r.per_path["l2"] if r.per_path.get("l2") else 0
        print(
            f"  {r.name:<14} {r.aggregate / 1e6:10.1f} {r.aggregate / PAYLOAD:8.3f}"
            f" {ratio:6.2f} {r.jain:6.3f}"
        )


def run_all(args: argparse.Namespace, work: Path) -> int:
    spec = load(SPEC)
    rows: list[Row] = []
    print(f"spec {SPEC.name}; {args.size / MiB:.0f} MiB; {args.streams} streams", flush=True)
    with Lab(spec) as lab:
        site = Site(lab, work, args.size)
        try:
            with inside(lab.ns("src")):
                c = site.start()
                with c.client() as client:
                    body = site.register(client)
                    body.update(streams_per_pair=args.streams, pacing={"policy": "off"})
                    for run in range(args.runs):
                        print(f"\n== run {run + 1}", flush=True)
                        rows.append(iperf3(lab, args.streams, args.seconds))
                        print_row(rows[-1])
                        for eq in (False, True):
                            rows.append(transfer(client, site, body, eq))
                            print_row(rows[-1])
        finally:
            site.stop()
    summary(rows)
    if any(r.hash_ok is False for r in rows):
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size", type=parse_size, default=1536 * MiB, help="default 1536M")
    parser.add_argument("--streams", type=int, default=16, help="even; default 16")
    parser.add_argument("--seconds", type=int, default=25, help="iperf3 run, default 25")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.streams % 2 or args.streams < 2:
        parser.error("--streams: an even number, half on each path")
    with tempfile.TemporaryDirectory(prefix="reservoir-bench-eq.", dir=args.dir) as tmp:
        try:
            return run_all(args, Path(tmp))
        except (PeerError, LabError, SpecError, EqualizerBenchError, httpx.HTTPError) as e:
            print(f"bench_equalizer: {e}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
