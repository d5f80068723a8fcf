"""Transfers through the coordinator's API on the emulated LFN: end to end, and a
coordinator killed mid-transfer.

    python -m reservoir.lab.bench_coordinator [--spec FILE] [--size 512M] [--streams 4]

A lab from the spec (default config/lab/lfn-2x500m-100ms.toml: hosts src and dst,
links l1 and l2 of 500 Mbit/s, 100 ms RTT). In host src: two source agents (one on
each link's address, ``cwnd_caps = "pacing-rate"``, a source file of SIZE/2 random
bytes each) and the coordinator (``reservoir server``, a SQLite file, tokens from the
environment) on l1's address. In host dst: two destination agents, each with its
builtin target serving one LUN file of SIZE/2 on its link's address. The bench enters
src's network namespace (setns) and, through ``/api/v1``, registers the agents with
their volumes, a source and a destination volume set (2 members, 4 MiB stripe unit)
and both links, then runs:

- iperf3: STREAMS iperf3 streams over each link at once for 15 s (memory to memory,
  the same links, the same run): the baseline the transfers are compared with;
- e2e: a transfer (STREAMS per pair, equalizer and verify on) to completion: seconds,
  goodput, share of 1 Gbit/s, LUN hashes against the sources, the per-stream
  telemetry of ``/transfers/{id}/streams`` (every stream must have samples) and the
  count of ``equalizer`` events;
- kill: the same into zeroed LUNs, the coordinator killed (-9) at ~40% of the
  transfer's progress and started again 2 s later on the same database: total
  seconds, each leg's summary (skipped extents, bytes sent twice), LUN hashes.

A benchmark, not a test: it prints figures and exits 0 unless something failed (1)
or a LUN differs from its source (2).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from reservoir.lab._lfn_copy import LINKS, Net
from reservoir.lab.bench_copy import file_digest, parse_size
from reservoir.lab.bench_lfn import iperf_mbit, iperf_server
from reservoir.lab.coord_site import Coordinator, Site, TransferError, inside
from reservoir.lab.errors import LabError
from reservoir.lab.network import Lab
from reservoir.lab.peers import PeerError, stop_process
from reservoir.lab.spec import SpecError, load
from reservoir.shipped import config_dir

DEFAULT_SPEC = config_dir() / "lab/lfn-2x500m-100ms.toml"
MiB = 1 << 20
STRIPE_UNIT = 4 * MiB
KILL_AT, RESTART_AFTER = 0.40, 2.0
TIMEOUT = 600.0  # a transfer that takes longer has failed
Json = dict[str, Any]
NAMES: dict[str, str] = {}  # agent id -> name, once registered


@dataclass
class Row:
    name: str
    seconds: float | None = None
    mb_s: float | None = None
    hash_ok: bool | None = None
    notes: str = ""
    failed: bool = False


def ok(r: httpx.Response) -> Any:
    if r.status_code not in (200, 201):
        where = f"{r.request.method} {r.request.url.path}"
        raise TransferError(f"{where}: {r.status_code} {r.text[:300]}")
    return r.json()


def register(c: httpx.Client, site: Site) -> Json:
    """Agents, the two volume sets, the two links; the body of ``POST /transfers``."""
    ids = {}
    for a in site.agents():
        ids[a.name] = ok(c.post("/agents", json=a.registration(site.member)))["id"]
    sets = {}
    for role in ("src", "dst"):
        members = [{"agent_id": ids[f"{role}-{k}"], "volume": "v0"} for k in LINKS]
        body = {"name": f"{role}-set", "members": members, "stripe_unit": STRIPE_UNIT}
        sets[role] = ok(c.post("/volume-sets", json=body))["id"]
    links = []
    for k in LINKS:
        body = {
            "name": k,
            "agent_a": ids[f"src-{k}"],
            "nic_a": k,
            "agent_b": ids[f"dst-{k}"],
            "nic_b": k,
            "capacity_bps": 500_000_000,
            "rtt_ms": 100.0,
        }
        links.append(ok(c.post("/links", json=body))["id"])
    print(f"  registered 4 agents, sets src-set/dst-set ({STRIPE_UNIT // MiB} MiB), links l1 l2")
    NAMES.update({v: k for k, v in ids.items()})
    return {"source": sets["src"], "destination": sets["dst"], "paths": links}


def events(c: httpx.Client, tid: str) -> list[Json]:
    found: list[Json] = ok(c.get(f"/transfers/{tid}/events"))
    return found


def poll(c: httpx.Client, tid: str) -> Json | None:
    """The transfer, or None while the coordinator does not answer."""
    try:
        r = c.get(f"/transfers/{tid}", timeout=5)
    except httpx.TransportError:
        return None
    t: Json = ok(r)
    return t


def await_transfer(c: httpx.Client, tid: str, hook: Callable[[Json | None], None]) -> Json:
    """Polls until the transfer completes; ``hook`` sees every poll."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        t = poll(c, tid)
        hook(t)
        if t is not None and t["state"] == "completed":
            return t
        if t is not None and t["state"] in ("failed", "cancelled"):
            last = [e["detail"] for e in events(c, tid)][-5:]
            release(c, tid)
            raise TransferError(f"transfer {t['state']}: {t['last_error']}; events {last}")
        time.sleep(0.1)
    release(c, tid)
    raise TransferError(f"transfer {tid} not completed after {TIMEOUT:.0f} s")


def release(c: httpx.Client, tid: str) -> None:
    """Cancels a transfer that did not complete: it holds its destination until it is
    final, and the next scenario writes the same volumes."""
    with contextlib.suppress(httpx.TransportError):
        c.post(f"/transfers/{tid}/cancel", timeout=5)


def check_hashes(site: Site) -> bool:
    same = True
    for k in LINKS:
        digest, want = file_digest(site.dst[k].data), site.sources[k].digest
        same &= digest == want
        verdict = "== source" if digest == want else f"!= source {want} (MISMATCH)"
        print(f"  LUN of dst-{k}: xxh3-128 {digest} {verdict}")
    return same


def print_rate(site: Site, seconds: float, done: Json) -> float:
    size = site.member * len(LINKS)
    mb_s = size / seconds / 1e6
    print(
        f"  {size / MiB:.0f} MiB in {seconds:.1f} s (POST to completed): {mb_s:.1f} MB/s"
        f" = {mb_s * 8:.0f} Mbit/s, {mb_s * 8 / 1000:.3f} of 1 Gbit/s"
    )
    for leg in done["legs"]:
        s = leg["summary"] or {}
        elapsed = float(s.get("elapsed") or 0)
        rate = int(s.get("copied_bytes") or 0) / elapsed / 1e6 if elapsed else 0.0
        print(
            f"  leg {leg['index']} {NAMES.get(leg['source_agent'], leg['source_agent'])} ->"
            f" {NAMES.get(leg['dest_agent'], leg['dest_agent'])}: agent summary"
            f" {elapsed:.1f} s, {rate:.1f} MB/s, verified {s.get('verified')}"
            f" ({s.get('verified_by') or '?'}), skipped {s.get('skipped_extents')} extents,"
            f" sent twice {s.get('resent_bytes')} bytes, {len(leg['paths'])} link(s)"
        )
    return mb_s


def stream_report(c: httpx.Client, tid: str, done: Json, streams: int) -> tuple[int, int]:
    """Per stream: samples, mean rate, RTT and cap; (streams with samples, expected)."""
    samples: list[Json] = ok(c.get(f"/transfers/{tid}/streams", params={"limit": 10_000}))
    by: dict[tuple[str, str], list[Json]] = {}
    for s in samples:
        by.setdefault((s["copy_id"], s["stream"]), []).append(s)
    want = {(leg["copy_id"], str(i)) for leg in done["legs"] for i in range(streams)}
    print(f"  /streams: {len(samples)} samples, {len(by)} streams (expected {len(want)})")
    for (copy, stream), rs in sorted(by.items()):
        bps = [float(r["bits_per_second"]) for r in rs if r.get("bits_per_second")]
        rtt = [int(r["rtt"]) for r in rs if r.get("rtt")]
        caps = [int(r["cap"]) for r in rs if r.get("cap")]
        print(
            f"    {copy.rsplit('-', 1)[-1]}/{stream} ({rs[0].get('path')}): {len(rs)} samples,"
            f" mean {statistics.fmean(bps) / 1e6 if bps else 0:.0f} Mbit/s,"
            f" rtt median {statistics.median(rtt) / 1e3 if rtt else 0:.0f} ms,"
            f" cap {'max ' + str(max(caps)) + ' seg in ' + str(len(caps)) if caps else 'none'}"
        )
    missing = want - set(by)
    if missing:
        print(f"  streams without samples: {sorted(missing)}")
    return len(want & set(by)), len(want)


def e2e(c: httpx.Client, site: Site, body: Json, args: argparse.Namespace) -> Row:
    print("\n== e2e: a transfer of the 2-agent set, equalizer and verify on", flush=True)
    start = time.monotonic()
    tid = ok(c.post("/transfers", json=body))["id"]
    done = await_transfer(c, tid, lambda t: None)
    seconds = time.monotonic() - start
    mb_s = print_rate(site, seconds, done)
    have, want = stream_report(c, tid, done, args.streams)
    history = events(c, tid)
    eq = [e for e in history if e["kind"] == "equalizer"]
    print(f"  events: {len(history)}, of them equalizer: {len(eq)}")
    for e in eq[:3]:
        print(f"    equalizer: {e['detail'][:160]}")
    same = check_hashes(site)
    notes = f"streams {have}/{want} with samples; {len(eq)} equalizer events"
    return Row("e2e", seconds, mb_s, same, notes, failed=have < want)


@dataclass
class KillPlan:
    coordinator: Coordinator
    total: int
    killed_at: float | None = None
    restarted_at: float | None = None
    done_at_kill: int = 0
    seen_after: bool = False

    def __call__(self, t: Json | None) -> None:
        if self.restarted_at is not None and not self.seen_after and t is not None:
            self.seen_after = True
            print(
                f"  first answer after the restart: {t['state']},"
                f" {t['done_bytes'] / self.total:.0%} done,"
                f" legs {[leg['copy_state'] for leg in t['legs']]}",
                flush=True,
            )
        if self.killed_at is None and t is not None:
            if t["state"] == "running" and t["done_bytes"] >= KILL_AT * self.total:
                self.done_at_kill = int(t["done_bytes"])
                pid = self.coordinator.kill()
                self.killed_at = time.monotonic()
                print(
                    f"  coordinator (pid {pid}) killed -9 at {self.done_at_kill / self.total:.0%}"
                    f" ({self.done_at_kill} of {self.total} bytes)",
                    flush=True,
                )
        elif self.killed_at is not None and self.restarted_at is None:
            time.sleep(max(0.0, self.killed_at + RESTART_AFTER - time.monotonic()))
            self.coordinator.start()
            self.restarted_at = time.monotonic()
            print(
                f"  restarted on the same database, serving after"
                f" {self.restarted_at - self.killed_at:.1f} s",
                flush=True,
            )


def kill(c: httpx.Client, site: Site, body: Json, args: argparse.Namespace) -> Row:
    print(f"\n== kill: the coordinator killed at ~{KILL_AT:.0%}, restarted", flush=True)
    site.fresh_luns()
    assert site.coordinator is not None
    plan = KillPlan(site.coordinator, site.member * len(LINKS))
    start = time.monotonic()
    tid = ok(c.post("/transfers", json=body))["id"]
    done = await_transfer(c, tid, plan)
    seconds = time.monotonic() - start
    if plan.killed_at is None:
        print("  the transfer completed before the coordinator could be killed")
    after = poll(c, tid)
    print(f"  total {seconds:.1f} s (POST to completed, outage included)")
    mb_s = print_rate(site, seconds, done)
    history = events(c, tid)
    for e in history:
        if e["kind"] != "equalizer":
            print(f"    event {e['kind']}: {e['detail'][:150]}")
    same = check_hashes(site)
    legs = done["legs"]
    skipped = sum(int((leg["summary"] or {}).get("skipped_extents") or 0) for leg in legs)
    resent = sum(int((leg["summary"] or {}).get("resent_bytes") or 0) for leg in legs)
    notes = f"killed at {plan.done_at_kill / plan.total:.0%}; skipped {skipped} ext"
    notes += f", sent twice {resent} B"
    missed = plan.killed_at is None or after is None
    return Row("kill", seconds, mb_s, same, notes if not missed else "no kill", failed=missed)


IPERF_SECONDS, IPERF_PORT = 15, 5301


def iperf3(site: Site, streams: int) -> Row:
    print(f"\n== iperf3: -P {streams} on each link at once, {IPERF_SECONDS} s", flush=True)
    lab, net = site.lab, site.net
    servers = [iperf_server(lab, net.dst[k], IPERF_PORT + i) for i, k in enumerate(LINKS)]
    try:
        clients = []
        for i, k in enumerate(LINKS):
            argv = ["iperf3", "-c", net.dst[k], "-B", net.src[k], "-p", str(IPERF_PORT + i)]
            argv += ["-J", "-P", str(streams), "-t", str(IPERF_SECONDS)]
            clients.append(
                lab.run("src", argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            )
        rates = [iperf_mbit(c, IPERF_SECONDS + 30) for c in clients]
    finally:
        for server in servers:
            stop_process(server)
    total = sum(rates)
    print(f"  {' + '.join(f'{r:.0f}' for r in rates)} = {total:.0f} Mbit/s", flush=True)
    return Row("iperf3", float(IPERF_SECONDS), total / 8, None, "memory to memory")


def run_one(name: str, fn: Callable[[], Row]) -> Row:
    try:
        return fn()
    except (TransferError, PeerError, LabError, httpx.HTTPError, subprocess.TimeoutExpired) as e:
        print(f"  {name}: FAILED: {e}", flush=True)
        return Row(name, failed=True, notes=f"failed: {str(e)[:60]}")


def summary_table(rows: list[Row]) -> None:
    print("\n== summary")
    base = next((r.mb_s for r in rows if r.name == "iperf3" and not r.failed), None)
    print(
        f"  {'scenario':<8} {'seconds':>8} {'MB/s':>7} {'of 1G':>6} {'/iperf3':>7}"
        f" {'hashes':>7}  notes"
    )
    for r in rows:
        sec = f"{r.seconds:.1f}" if r.seconds is not None else "-"
        mb = f"{r.mb_s:.1f}" if r.mb_s is not None else "-"
        frac = f"{r.mb_s * 8 / 1000:.3f}" if r.mb_s is not None else "-"
        vs = f"{r.mb_s / base:.2f}" if r.mb_s is not None and base else "-"
        same = {True: "equal", False: "DIFFER", None: "-"}[r.hash_ok]
        flag = " (FAILED)" if r.failed else ""
        print(f"  {r.name:<8} {sec:>8} {mb:>7} {frac:>6} {vs:>7} {same:>7}  {r.notes}{flag}")


def run_all(args: argparse.Namespace, work: Path) -> int:
    spec = load(args.spec)
    member = args.size // len(LINKS)
    print(f"spec {args.spec}; size {args.size / MiB:.0f} MiB; {args.streams} streams per pair")
    rows: list[Row] = []
    with Lab(spec) as lab:
        net = Net.of(lab.spec)
        site = Site(lab, net, work, member)
        print(f"lab {lab.prefix}: sources 2 x {member / MiB:.0f} MiB of random data", flush=True)
        site.prepare()
        try:
            with inside(lab.ns("src")):
                c = site.start()
                print(f"  agents and the coordinator ({c.api}) up", flush=True)
                with c.client() as client:
                    body = register(client, site)
                    body.update(streams_per_pair=args.streams, equalizer=True, verify=True)
                    rows.append(run_one("iperf3", lambda: iperf3(site, args.streams)))
                    rows.append(run_one("e2e", lambda: e2e(client, site, body, args)))
                    rows.append(run_one("kill", lambda: kill(client, site, body, args)))
        finally:
            site.stop()
    summary_table(rows)
    if any(r.hash_ok is False for r in rows):
        return 2
    return 1 if any(r.failed for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    parser.add_argument("--size", type=parse_size, default=512 * MiB, help="default 512M")
    parser.add_argument("--streams", type=int, default=4, help="streams per server pair")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.size % (len(LINKS) * STRIPE_UNIT):
        parser.error(f"--size: a multiple of {len(LINKS) * STRIPE_UNIT // MiB} MiB")
    with tempfile.TemporaryDirectory(prefix="reservoir-bench-coord.", dir=args.dir) as tmp:
        try:
            return run_all(args, Path(tmp))
        except (PeerError, LabError, SpecError, TransferError, httpx.HTTPError) as e:
            print(f"bench_coordinator: {e}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
