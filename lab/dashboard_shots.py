"""Screenshots of the dashboard during a live transfer on the emulated LFN.

    python -m reservoir.lab.dashboard_shots [--spec FILE] [--size 3G] [--streams 8]
                                            [--after 15] [--out /tmp/reservoir-screens]

The lab of :mod:`reservoir.lab.bench_coordinator` (default spec
config/lab/lfn-2x500m-100ms.toml: two links of 500 Mbit/s, 100 ms RTT): two source
agents and the coordinator in host src, two destination agents in host dst, all
registered with a source and a destination volume set (2 members each) and both links.
A transfer of STREAMS per server pair (2 legs: 16 streams by default) runs while a
headless Chromium, started inside src's network namespace (a wrapper script doing
``ip netns exec``: the coordinator listens on a lab address), signs in with the
coordinator's user token and takes full-page PNG screenshots:

- ``transfer-live.png``: the transfer's page AFTER seconds into the transfer;
- ``transfers.png``: the transfer list while it runs;
- ``transfer-completed.png``: the transfer's page once it completed (verification);
- ``agents.png``, ``links.png``: the registry pages.

The browser is Debian's Chromium (``/usr/bin/chromium``, no Playwright download).
:func:`dashboard_lab` and :func:`chromium_in` are what tests/browser uses too.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from reservoir.lab import netns
from reservoir.lab._lfn_copy import Net
from reservoir.lab.bench_coordinator import DEFAULT_SPEC, STRIPE_UNIT, register
from reservoir.lab.bench_copy import parse_size
from reservoir.lab.coord_site import COORD_PORT, Coordinator, Site, inside
from reservoir.lab.errors import LabError
from reservoir.lab.network import Lab
from reservoir.lab.peers import PeerError
from reservoir.lab.spec import SpecError, load
from reservoir.server.app import web

__all__ = [
    "CHROMIUM",
    "LAUNCH_ARGS",
    "SCREENS",
    "DashboardLab",
    "chromium_in",
    "dashboard_lab",
    "missing",
]

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--no-sandbox", "--disable-background-networking"]
SCREENS = Path("/tmp/reservoir-screens")
MiB = 1 << 20
Json = dict[str, Any]
FRAMES = """() => new Promise((done) => {
  let frames = 0;
  const start = performance.now();
  const tick = (now) => {
    frames += 1;
    if (now - start < 2000) requestAnimationFrame(tick);
    else done(frames / ((now - start) / 1000));
  };
  requestAnimationFrame(tick);
})"""  # animation frames per second over 2 s


def missing() -> str | None:
    """Why the dashboard cannot be shown in the lab here, or None."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install chromium, or make install)"
    if not (web.DIST / "index.html").is_file():
        return f"the dashboard is not built ({web.DIST}): run make install"
    try:
        import playwright.sync_api  # noqa: F401, PLC0415 - a dev dependency, maybe absent
    except ImportError:
        return "the playwright package is missing (pip install -e '.[dev]')"
    return netns.can_create()


def chromium_in(ns: str, folder: Path) -> Path:
    """A script that runs Chromium inside network namespace ``ns`` (for Playwright's
    ``executable_path``: the coordinator listens on an address of that namespace)."""
    wrapper = folder / f"chromium-in-{ns}"
    wrapper.write_text(
        f'#!/bin/sh\nexec ip netns exec {shlex.quote(ns)} {shlex.quote(str(CHROMIUM))} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


@dataclass
class DashboardLab:
    """The running lab: the coordinator's address, its user token, and a transfer body
    (source and destination sets, both links) to start transfers with."""

    lab: Lab
    site: Site
    coordinator: Coordinator
    body: Json

    @property
    def ns(self) -> str:
        return self.lab.ns("src")

    @property
    def base(self) -> str:
        """The dashboard's URL (reachable from inside :attr:`ns` only)."""
        return f"http://{self.coordinator.addr}:{COORD_PORT}"

    @property
    def token(self) -> str:
        return self.coordinator.user_token

    def call(
        self, method: str, path: str, json: Json | None = None, params: Json | None = None
    ) -> httpx.Response:
        """One API call from inside the lab's namespace."""
        with inside(self.ns), self.coordinator.client() as c:
            return c.request(method, path, json=json, params=params)

    def metrics(self) -> str:
        """The coordinator's /metrics text (Prometheus), from inside the namespace."""
        headers = {"Authorization": f"Bearer {self.token}"}
        with inside(self.ns):
            r = httpx.get(f"{self.base}/metrics", headers=headers, timeout=30)
        if r.status_code != 200:
            raise PeerError(f"GET /metrics: {r.status_code} {r.text[:300]}")
        return r.text

    def start(self, streams: int, **extra: Any) -> str:
        """Starts a transfer (equalizer and verify on); its id."""
        body = {**self.body, "streams_per_pair": streams, "equalizer": True, "verify": True}
        r = self.call("POST", "/transfers", {**body, **extra})
        if r.status_code != 201:
            raise PeerError(f"POST /transfers: {r.status_code} {r.text[:300]}")
        tid: str = r.json()["id"]
        return tid

    def transfer(self, tid: str) -> Json:
        r = self.call("GET", f"/transfers/{tid}")
        if r.status_code != 200:
            raise PeerError(f"GET /transfers/{tid}: {r.status_code} {r.text[:300]}")
        t: Json = r.json()
        return t

    def wait(self, tid: str, until: Callable[[Json], bool], timeout: float = 60) -> Json:
        """Polls the transfer until ``until`` holds; PeerError on failure or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            t = self.transfer(tid)
            if until(t):
                return t
            if t["state"] in ("failed", "cancelled") or time.monotonic() > deadline:
                raise PeerError(f"transfer {tid}: {t['state']} ({t['last_error']})")
            time.sleep(0.2)


@contextmanager
def dashboard_lab(
    work: Path, size: int = 1024 * MiB, spec: Path = DEFAULT_SPEC
) -> Iterator[DashboardLab]:
    """The lab up, agents and coordinator running and registered; all stopped (by PID)
    and the namespaces deleted at the end, also on failure."""
    if size % (2 * STRIPE_UNIT):
        raise ValueError(f"size: a multiple of {2 * STRIPE_UNIT // MiB} MiB")
    with Lab(load(spec)) as lab:
        site = Site(lab, Net.of(lab.spec), work, size // 2)
        try:
            site.prepare()
            with inside(lab.ns("src")):
                coordinator = site.start()
                with coordinator.client() as c:
                    body = register(c, site)
            yield DashboardLab(lab, site, coordinator, body)
        finally:
            site.stop()


def running(t: Json) -> bool:
    return bool(t["state"] == "running" and t["done_bytes"] > 0)


def completed(t: Json) -> bool:
    return bool(t["state"] == "completed")


def take_shots(d: DashboardLab, out: Path, streams: int, after: float, work: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - a dev dependency

    shots: list[Path] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(chromium_in(d.ns, work)), headless=True, args=LAUNCH_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{d.base}/")
            page.fill("#token", d.token)
            page.click("#login button[type=submit]")
            page.wait_for_selector("header.top")
            tid = d.start(streams)
            print(f"  transfer {tid}: {streams} streams per pair, 2 legs", flush=True)
            d.wait(tid, running)
            started = time.monotonic()
            page.goto(f"{d.base}/#/transfers/{tid}")
            page.wait_for_selector("#chart-streams canvas")
            page.wait_for_timeout(max(0.0, after - (time.monotonic() - started)) * 1000)
            points = page.get_attribute("#chart-streams", "data-points")
            n = page.get_attribute("#chart-streams", "data-streams")
            fps = page.evaluate(FRAMES)
            cost = page.get_attribute("#chart-streams", "data-draw-ms")
            print(
                f"  after {after:.0f} s: {points} samples of {n} streams in the page;"
                f" {fps:.0f} frames/s, {cost} ms of chart work a frame"
            )
            shots.append(shot(page, out / "transfer-live.png"))
            page.goto(f"{d.base}/#/transfers")
            page.wait_for_selector(f"tr[data-transfer-id='{tid}']")
            page.wait_for_timeout(3000)  # two refreshes: a rate and an ETA
            shots.append(shot(page, out / "transfers.png"))
            d.wait(tid, completed, timeout=600)
            page.goto(f"{d.base}/#/transfers/{tid}")
            page.wait_for_selector("#verification [data-verified='all']", timeout=15_000)
            page.wait_for_timeout(1500)
            shots.append(shot(page, out / "transfer-completed.png"))
            for name in ("agents", "links"):
                page.goto(f"{d.base}/#/{name}")
                page.wait_for_selector("main table")
                shots.append(shot(page, out / f"{name}.png"))
        finally:
            browser.close()
    return shots


def shot(page: Any, path: Path) -> Path:
    page.screenshot(path=str(path), full_page=True)
    print(f"  {path}", flush=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    parser.add_argument("--size", type=parse_size, default=3072 * MiB, help="default 3G")
    parser.add_argument("--streams", type=int, default=8, help="streams per server pair")
    parser.add_argument("--after", type=float, default=15.0, help="seconds before the shot")
    parser.add_argument("--out", type=Path, default=SCREENS, help=f"default {SCREENS}")
    args = parser.parse_args(argv)
    why = missing()
    if why:
        print(f"dashboard_shots: {why}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"spec {args.spec}; {args.size / MiB:.0f} MiB; {args.streams} streams per pair")
    with tempfile.TemporaryDirectory(prefix="reservoir-dashboard-shots.") as tmp:
        try:
            with dashboard_lab(Path(tmp), args.size, args.spec) as d:
                print(f"  lab {d.lab.prefix}: coordinator {d.base} (in {d.ns})", flush=True)
                take_shots(d, args.out, args.streams, args.after, Path(tmp))
        except (PeerError, LabError, SpecError, ValueError, httpx.HTTPError) as e:
            print(f"dashboard_shots: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
