"""The demo: a real transfer between agents through an emulated LFN, with the dashboard up.

    python -m reservoir.lab.demo [--spec FILE] [--size 2G] [--streams 8]
                                 [--listen 127.0.0.1:8470]

The lab of :func:`reservoir.lab.dashboard_shots.dashboard_lab` (default spec
config/lab/lfn-2x500m-100ms.toml: two links of 500 Mbit/s, 100 ms RTT, 1 Gbit/s in
all): two source agents (SIZE/2 of random data each) and the coordinator in host src,
two destination agents serving a LUN each in host dst, all registered. The
coordinator listens on a lab address in src's namespace; :mod:`reservoir.lab.forward`
makes it reachable on the host at LISTEN (loopback only), so the dashboard opens in a
browser at http://127.0.0.1:8470/ (over SSH: ``ssh -L 8470:127.0.0.1:8470 HOST``) with
the user token printed here.

Then a transfer of the source volume set to the destination set (STREAMS per server
pair, 2 pairs: 16 streams; equalizer and verify on) through the coordinator's API, its
progress once a second, and the result: seconds, MB/s, share of the bottleneck, the
agents' verification and the LUN files' hashes against the sources. With a terminal on
stdin, the lab and the dashboard stay up until Ctrl-C; otherwise the demo ends after the
summary. Everything (processes, by PID; namespaces) is taken down on exit, on Ctrl-C and
on failure. Exit status: 0, 1 if something failed, 2 if a LUN differs from its source.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from reservoir.lab import netns
from reservoir.lab.bench_coordinator import DEFAULT_SPEC, STRIPE_UNIT, check_hashes
from reservoir.lab.bench_copy import parse_size
from reservoir.lab.coord_site import COORD_PORT
from reservoir.lab.dashboard_shots import DashboardLab, dashboard_lab
from reservoir.lab.errors import LabError
from reservoir.lab.forward import ForwardError, ForwardThread, listen_socket, parse_addr, socket_in
from reservoir.lab.peers import PeerError
from reservoir.lab.spec import SpecError, load
from reservoir.server.app import web

__all__ = ["main"]

MiB = 1 << 20
TIMEOUT = 600.0  # a transfer that takes longer has failed
POLL = 0.25  # seconds between polls of the transfer
RATE_WINDOW = 3  # seconds of progress behind the rate and the ETA
DEFAULT_LISTEN = ("127.0.0.1", 8470)
Json = dict[str, Any]


class DemoError(LabError):
    """Something the demo needs is missing, or the transfer could not run."""


def say(text: str = "") -> None:
    print(text, flush=True)


def bold(text: str) -> None:
    say(f"\n\033[1m{text}\033[0m" if sys.stdout.isatty() else f"\n{text}")


# ------------------------------------------------------------------ signals


def interrupt_once(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C or SIGTERM: raise once, ignore the next ones while tearing down."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt(signum)


def install_signals() -> None:
    signal.signal(signal.SIGINT, interrupt_once)
    signal.signal(signal.SIGTERM, interrupt_once)


# ------------------------------------------------------------------ the dashboard


def preflight() -> str | None:
    """Why the demo cannot run here, or None."""
    if not (web.DIST / "index.html").is_file():
        return f"the dashboard is not built ({web.DIST}): run make install"
    return netns.can_create()


def check_forwarding(url: str) -> None:
    """The dashboard and the API answer through the forwarder."""
    try:
        page = httpx.get(url, timeout=10)
        health = httpx.get(f"{url}api/v1/health", timeout=10)
    except httpx.HTTPError as e:
        raise DemoError(f"the dashboard does not answer through the forwarder: {e}") from e
    if page.status_code != 200 or health.status_code != 200:
        raise DemoError(f"through the forwarder: / {page.status_code}, health {health.status_code}")


def banner(d: DashboardLab, url: str, listen: tuple[str, int]) -> None:
    port = listen[1]
    bold("The dashboard")
    say(f"  URL:    {url}")
    say(f"  token:  {d.token}")
    say("          (paste it into the login form; it is this lab's user token)")
    say(f"  over SSH, forward the port first: ssh -L {port}:{listen[0]}:{port} <this host>")
    say(f"  (the coordinator itself listens on {d.base} inside namespace {d.ns};")
    say(f"   a forwarder in this process connects {listen[0]}:{port} to it)")


def show_target(d: DashboardLab) -> None:
    """``iscsi-ls`` of a destination agent's portal, from host src."""
    portal = d.site.dst["l1"].portal
    bold(f"src$ iscsi-ls -s iscsi://{portal}")
    try:
        out = d.lab.exec("src", ["iscsi-ls", "-s", f"iscsi://{portal}"], timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        say(f"  (iscsi-ls: {e})")
        return
    say((out.stdout + out.stderr).rstrip() or "  (no output)")


# ------------------------------------------------------------------ the transfer


def bottleneck_bps(d: DashboardLab) -> float:
    return sum(link.rate_mbit for link in d.lab.spec.links) * 1e6


def progress_line(t: Json, elapsed: float, rate: float) -> str:
    total = int(t["total_bytes"]) or 1
    done = int(t["done_bytes"])
    eta = f"{(total - done) / rate:5.0f} s" if rate > 0 and done < total else "    - "
    return (
        f"  {elapsed:5.1f} s  {t['state']:<10} {done / total:6.1%}"
        f"  {rate / 1e6:6.1f} MB/s  ETA {eta}"
    )


def api_call(api: httpx.Client, method: str, path: str, body: Json | None = None) -> Json:
    r = api.request(method, path, json=body)
    if r.status_code not in (200, 201):
        raise DemoError(f"{method} {path}: {r.status_code} {r.text[:300]}")
    found: Json = r.json()
    return found


def follow(api: httpx.Client, tid: str, start: float) -> tuple[Json, float]:
    """Polls 4 times a second, prints the progress once a second, until the transfer
    ends; (the transfer, seconds from ``start``, the POST, to its end)."""
    seen: deque[tuple[float, int]] = deque([(start, 0)], maxlen=RATE_WINDOW + 1)
    printed = start - 1.0
    while True:
        t = api_call(api, "GET", f"/transfers/{tid}")
        now = time.monotonic()
        ended = t["state"] in ("completed", "failed", "cancelled")
        if now - printed >= 1.0 or ended:
            printed = now
            seen.append((now, int(t["done_bytes"])))
            (t0, b0), (t1, b1) = seen[0], seen[-1]
            rate = (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
            say(progress_line(t, now - start, rate))
        if ended:
            return t, now - start
        if now - start > TIMEOUT:
            raise DemoError(f"transfer {tid} not finished after {TIMEOUT:.0f} s")
        time.sleep(POLL)


def verification(t: Json) -> bool:
    """Prints each leg's verification; True if every leg verified."""
    every = True
    for leg in t["legs"]:
        s = leg["summary"] or {}
        ok = s.get("verified") is True
        every &= ok
        how = f": {s['verification']}" if s.get("verification") else ""
        if s.get("source_rehashed"):
            how += "; source written during the copy, then hashed again: equal to what was sent"
        elif s.get("source_watched"):
            how += f"; source unchanged throughout (by {s['source_watched']})"
        verdict = f"verified{how}" if ok else "NOT verified"
        say(f"  leg {leg['index']}: {leg['bytes'] / MiB:.0f} MiB, {verdict}")
    return every


def result(d: DashboardLab, t: Json, seconds: float) -> int:
    bold("Result")
    if t["state"] != "completed":
        say(f"  the transfer {t['state']}: {t['last_error']}")
        return 1
    size = int(t["total_bytes"])
    mb_s = size / seconds / 1e6
    share = mb_s * 8e6 / bottleneck_bps(d)
    say(
        f"  {size / MiB:.0f} MiB in {seconds:.1f} s (POST to completed): {mb_s:.1f} MB/s"
        f" = {mb_s * 8:.0f} Mbit/s, {share:.3f} of the {bottleneck_bps(d) / 1e9:g} Gbit/s"
        " bottleneck"
    )
    verified = verification(t)
    same = check_hashes(d.site)
    if not same:
        say("  FAILED: a LUN differs from its source")
        return 2
    if not verified:
        say("  FAILED: not every leg was verified")
        return 1
    say("  OK: completed, verified, LUNs equal to the sources")
    return 0


def transfer(d: DashboardLab, url: str, streams: int) -> int:
    """The transfer through the API on the forwarded port, as the dashboard sees it."""
    body = {**d.body, "streams_per_pair": streams, "equalizer": True, "verify": True}
    headers = {"Authorization": f"Bearer {d.token}"}
    with httpx.Client(base_url=f"{url}api/v1", headers=headers, timeout=30) as api:
        start = time.monotonic()
        t = api_call(api, "POST", "/transfers", body)
        tid = str(t["id"])
        pairs = len(t["legs"])
        bold(f"Transfer {tid}: {streams} streams per server pair x {pairs} pairs, equalizer on")
        say(f"  watch it live: {url}#/transfers/{tid}")
        t, seconds = follow(api, tid, start)
        agents: list[Json] = api.get("/agents").json()
    say("  agents (heartbeats): " + ", ".join(f"{a['name']} {a['status']}" for a in agents))
    return result(d, t, seconds)


def hold(url: str) -> None:
    """Until Ctrl-C, with a terminal on stdin."""
    if not sys.stdin.isatty():
        return
    say(f"\nThe dashboard stays up at {url} ; Ctrl-C to stop (the lab is taken down).")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        say("\nstopping")


# ------------------------------------------------------------------ main


def run(args: argparse.Namespace, listener: socket.socket, work: Path) -> int:
    listen = listener.getsockname()[:2]
    url = f"http://{listen[0]}:{listen[1]}/"
    bold(f"Lab up from {args.spec}")
    say(f"  sources 2 x {args.size // 2 / MiB:.0f} MiB, agents and coordinator starting (~10-20 s)")
    with dashboard_lab(work, args.size, args.spec) as d:
        say(f"  lab {d.lab.prefix}: hosts {d.lab.ns('src')} and {d.lab.ns('dst')}")
        target = (d.coordinator.addr, COORD_PORT)
        with ForwardThread(listener, target, socket_in(d.ns)):
            check_forwarding(url)
            banner(d, url, listen)
            show_target(d)
            code = transfer(d, url, args.streams)
            hold(url)
    say("lab down")
    return code


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m reservoir.lab.demo",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument(
        "--spec", type=Path, default=DEFAULT_SPEC, help="hosts src, dst; links l1, l2"
    )
    parser.add_argument("--size", type=parse_size, default=2048 * MiB, help="default 2G")
    parser.add_argument("--streams", type=int, default=8, help="per server pair (default 8)")
    parser.add_argument(
        "--listen", type=parse_addr, default=DEFAULT_LISTEN, help="default 127.0.0.1:8470"
    )
    args = parser.parse_args(argv)
    if args.size % (2 * STRIPE_UNIT):
        parser.error(f"--size: a multiple of {2 * STRIPE_UNIT // MiB} MiB")
    if not 1 <= args.streams <= 256:
        parser.error("--streams: 1 to 256")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    why = preflight()
    if why:
        print(f"demo: {why}", file=sys.stderr)
        return 1
    install_signals()
    try:
        load(args.spec)
        with (
            listen_socket(*args.listen) as listener,
            tempfile.TemporaryDirectory(prefix="reservoir-demo.") as tmp,
        ):
            return run(args, listener, Path(tmp))
    except KeyboardInterrupt as e:
        signum = int(e.args[0]) if e.args else signal.SIGINT
        print("demo: interrupted; lab taken down", file=sys.stderr)
        return 128 + signum
    except (DemoError, ForwardError, PeerError, LabError, SpecError, httpx.HTTPError) as e:
        print(f"demo: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
