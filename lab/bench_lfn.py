"""``reservoir copy`` on an emulated LFN: goodput, failover, MPTCP, a killed target.

    python -m reservoir.lab.bench_lfn [--spec FILE] [--size 2G] [--streams 8]
                                      [--seconds 15] [--only NAMES]

A lab from the spec (default config/lab/lfn-2x500m-100ms.toml: hosts src and dst,
links l1 and l2 of 500 Mbit/s, 100 ms RTT). The target serves a LUN file in dst on
both links' addresses; copies run in src. Scenarios (``--only`` takes a comma list):

- baseline: iperf3 -P STREAMS/2 over each link at once, receiver goodput;
- paths: a SIZE copy with ``--path`` over both links; seconds, goodput, share of
  1 Gbit/s and of the iperf3 total, LUN hash against the source;
- cut: the same, l1 cut at ~30% (from src's per-link tx counters) and restored 8 s
  later: aggregate throughput lost, path failed/recovered times, l1 back in use;
- mptcp, mptcp-cut: one ``--mptcp`` URL (the target announces its l2 address);
- kill: the target killed (-9) at ~40% and restarted 2 s later; ``--resume`` if the
  copy gave up.

A benchmark, not a test: it prints figures and exits 0 unless a peer failed (1) or a
LUN differs from its source (2).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from reservoir.lab import _lfn_scenarios as sc
from reservoir.lab._lfn_copy import LINKS, Net
from reservoir.lab.bench_copy import parse_size, write_source
from reservoir.lab.errors import LabError
from reservoir.lab.lfn_sampling import link_devices
from reservoir.lab.network import Lab
from reservoir.lab.peers import PeerError, stop_process
from reservoir.lab.spec import SpecError, load
from reservoir.shipped import config_dir

DEFAULT_SPEC = config_dir() / "lab/lfn-2x500m-100ms.toml"
SCENARIOS = ("baseline", "paths", "cut", "mptcp", "mptcp-cut", "kill")
IPERF_PORT = 5201


def iperf_server(lab: Lab, addr: str, port: int) -> subprocess.Popen[bytes]:
    argv = ["iperf3", "-s", "-1", "-B", addr, "-p", str(port)]
    server: subprocess.Popen[bytes] = lab.run(
        "dst", argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 10
    while not lab.exec("dst", ["ss", "-Hltn", f"sport = :{port}"]).stdout.strip():
        if server.poll() is not None or time.monotonic() > deadline:
            raise PeerError(f"iperf3 server on {addr}:{port} did not listen")
        time.sleep(0.05)
    return server


def iperf_client(b: sc.Bench, link: str, port: int) -> subprocess.Popen[str]:
    argv = ["iperf3", "-c", b.net.dst[link], "-B", b.net.src[link], "-p", str(port), "-J"]
    argv += ["-P", str(max(1, b.args.streams // 2)), "-t", str(b.args.seconds)]
    proc: subprocess.Popen[str] = b.lab.run(
        "src", argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return proc


def iperf_mbit(proc: subprocess.Popen[str], timeout: float) -> float:
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise PeerError(f"iperf3 client failed ({proc.returncode}): {(out + err)[-400:]}")
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e6


def baseline(b: sc.Bench) -> sc.Row:
    per = max(1, b.args.streams // 2)
    sc.header(f"baseline: iperf3 -P {per} -t {b.args.seconds} on each link at once (-J)")
    servers = [iperf_server(b.lab, b.net.dst[k], IPERF_PORT + i) for i, k in enumerate(LINKS)]
    try:
        clients = [iperf_client(b, k, IPERF_PORT + i) for i, k in enumerate(LINKS)]
        rates = {k: iperf_mbit(c, b.args.seconds + 30) for k, c in zip(LINKS, clients, strict=True)}
    finally:
        for s in servers:
            stop_process(s)
    b.iperf_mbit = sum(rates.values())
    for k, mbit in rates.items():
        print(f"  {k}: {mbit:.0f} Mbit/s receiver goodput ({mbit / 500:.2f} of 500 Mbit/s)")
    print(f"  total: {b.iperf_mbit:.0f} Mbit/s = {b.iperf_mbit / 1000:.3f} of 1 Gbit/s", flush=True)
    row = sc.Row("baseline", seconds=float(b.args.seconds), hash_ok=None)
    row.mbit = b.iperf_mbit
    row.notes = " + ".join(f"{k} {v:.0f}" for k, v in rates.items()) + " Mbit/s"
    return row


RUNNERS: dict[str, Callable[[sc.Bench], sc.Row]] = {
    "baseline": baseline,
    "paths": sc.paths,
    "cut": sc.cut,
    "mptcp": sc.mptcp,
    "mptcp-cut": sc.mptcp_cut,
    "kill": sc.kill,
}


def run_one(b: sc.Bench, name: str) -> sc.Row:
    try:
        return RUNNERS[name](b)
    except (PeerError, LabError, subprocess.TimeoutExpired) as e:
        print(f"  {name}: FAILED: {e}", flush=True)
        return sc.Row(name, peer_failed=True, notes=f"failed: {str(e)[:60]}")


@contextmanager
def bench(args: argparse.Namespace, work: Path, lab: Lab) -> Iterator[sc.Bench]:
    net = Net.of(lab.spec)
    devices = link_devices(lab.ns("src"), net.src)
    print(f"lab {lab.prefix}: src devices {devices}", flush=True)
    print(f"source: {args.size / (1 << 30):.2f} GiB of random data", flush=True)
    start = time.monotonic()
    src = write_source(work / "source.img", args.size, 0)
    print(f"  written and fsynced in {time.monotonic() - start:.1f} s, xxh3-128 {src.digest}")
    yield sc.Bench(args, lab, net, src, work, devices)


def run_all(args: argparse.Namespace, work: Path) -> int:
    spec = load(args.spec)
    print(f"spec {args.spec}; scenarios {', '.join(args.only)}; streams {args.streams}")
    rows: list[sc.Row] = []
    with Lab(spec) as lab, bench(args, work, lab) as b:
        for name in args.only:
            rows.append(run_one(b, name))
    sc.summary_table(rows)
    if any(r.hash_ok is False for r in rows):
        return 2
    return 1 if any(r.peer_failed for r in rows) else 0


def only(text: str) -> list[str]:
    """``--only a,b``: the named scenarios, in the benchmark's order."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in SCENARIOS for n in names):
        raise argparse.ArgumentTypeError(f"a comma list of {', '.join(SCENARIOS)}")
    return [n for n in SCENARIOS if n in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    parser.add_argument("--size", type=parse_size, default=2 << 30, help="default 2G")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=15, help="iperf3 duration")
    parser.add_argument("--only", type=only, default=list(SCENARIOS), help=",".join(SCENARIOS))
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="reservoir-bench-lfn.", dir=args.dir) as tmp:
        try:
            return run_all(args, Path(tmp))
        except (PeerError, LabError, SpecError) as e:
            print(f"bench_lfn: {e}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
