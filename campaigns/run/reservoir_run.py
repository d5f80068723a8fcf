"""One reservoir run: a transfer through the coordinator's API, disk to disk, verified.

The site's source volume (``size`` random bytes) goes to the zeroed LUN of the
destination agent with ``streams`` streams over the campaign's paths (one server pair:
``streams_per_pair`` = streams), the scenario's pacing policy (a ``pacing_rate_mbit``
becomes the plan's margin below the link's capacity), equalizer and verification
mode. The run lasts from the POST to ``completed``, by the coordinator's clock (when
it stored the transfer, when it saw the copies end), not when a poll here saw it; its
figures come from the coordinator's per-stream telemetry and events, the per-link
wire counters, the agents' CPU time and a hash of the LUN against the source.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime
from typing import Any, Protocol

from reservoir.campaigns._scenario import Event as Planned
from reservoir.campaigns._scenario import Scenario
from reservoir.campaigns.results import Event, Run
from reservoir.campaigns.run.site import PathEnds, Place
from reservoir.campaigns.run.telemetry import (
    failover,
    intervals,
    scenario_record,
    stream_records,
)
from reservoir.campaigns.run.timeline import MARGIN, Timeline, sampler
from reservoir.lab.coord_site import TransferError

__all__ = ["run_reservoir", "transfer_body"]

Json = dict[str, Any]
Progress = Callable[[float, float], None]  # (fraction done, bit/s)
MIN_TIMEOUT_S = 300.0
PAGE = 10_000
LOOPBACK_MSS = 65483  # lo's MTU 65536 less IPv4 and TCP headers with timestamps


class Site(Protocol):
    """Where a transfer runs: a lab's site (``run/site.py``) or a registered network
    (``remote.py``)."""

    size: int
    body: Json

    @property
    def paths(self) -> list[PathEnds]: ...
    @property
    def place(self) -> Place | None: ...
    def call(self, method: str, path: str, **kw: Any) -> Any: ...
    def fresh_lun(self) -> None: ...
    def lun_equals_source(self) -> bool | None: ...
    def cpu_seconds(self) -> float: ...


def transfer_body(site: Site, scenario: Scenario) -> Json:
    """``POST /transfers`` for the scenario."""
    margin = MARGIN
    rates = [p.rate_bps for p in site.paths if p.rate_bps > 0]
    if scenario.pacing_rate_bps is not None and rates:
        margin = min(0.95, max(0.0, 1 - scenario.pacing_rate_bps / min(rates)))
    return {
        **site.body,
        "streams_per_pair": scenario.streams,
        "pacing": {"policy": scenario.pacing, "margin": round(margin, 6)},
        "equalizer": bool(scenario.equalizer),
        "verification": scenario.verify or "storage",
        "multilink": scenario.multilink,
        "congestion": scenario.cc,
    }


def _timeout(site: Site) -> float:
    """Ten times the size at the slowest of 100 Mbit/s and the paths' sum."""
    rate = sum(p.rate_bps for p in site.paths) or 1e9
    return max(MIN_TIMEOUT_S, 10 * site.size * 8 / min(rate, 1e8))


def _await(site: Site, tid: str, timeline: Timeline, tick: Progress) -> Json:
    deadline = time.monotonic() + _timeout(site)
    while True:
        timeline.poll()
        t: Json = site.call("GET", f"/transfers/{tid}")
        if t["state"] == "completed":
            return t
        if t["state"] in ("failed", "cancelled"):
            if t["state"] == "failed":  # let its destination go: the next run writes it
                site.call("POST", f"/transfers/{tid}/cancel")
            raise TransferError(f"transfer {t['state']}: {t['last_error']}")
        if time.monotonic() > deadline:
            site.call("POST", f"/transfers/{tid}/cancel")
            raise TransferError(f"transfer not completed after {_timeout(site):.0f} s")
        elapsed = time.time() - timeline.started
        done = int(t["done_bytes"])
        tick(done / max(1, int(t["total_bytes"])), done * 8 / elapsed if elapsed > 0 else 0.0)
        time.sleep(0.25)


def _seconds(transfer: Json, observed: float) -> float:
    """From the request to the verified end: the transfer's ``completed_at`` less its
    ``created_at``, both the coordinator's; ``observed`` (from before the POST to the
    poll that saw it completed, up to a poll interval late) where those are missing."""
    created, completed = transfer.get("created_at"), transfer.get("completed_at")
    if not created or not completed:
        return observed
    spent = (_when(str(completed)) - _when(str(created))).total_seconds()
    return spent if 0 < spent <= observed else observed


def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _samples(site: Site, tid: str) -> list[Json]:
    """Every per-stream sample of the transfer: the API gives the newest ``limit``, so
    page back with ``until`` = the oldest time seen (its samples come again)."""
    seen: dict[tuple[str, str, float], Json] = {}
    until: float | None = None
    while True:
        params: Json = {"limit": PAGE} if until is None else {"limit": PAGE, "until": until}
        page: list[Json] = site.call("GET", f"/transfers/{tid}/streams", params=params)
        fresh = 0
        for s in page:
            key = (str(s["copy_id"]), str(s["stream"]), float(s["time"]))
            fresh += key not in seen
            seen.setdefault(key, s)
        if len(page) < PAGE or not fresh:
            return sorted(seen.values(), key=lambda s: float(s["time"]))
        until = float(page[0]["time"])


def _cap_events(site: Site, tid: str, started: float) -> list[Event]:
    found: list[Json] = site.call("GET", f"/transfers/{tid}/events")
    out = []
    for e in found:
        if e["kind"] != "equalizer":
            continue
        at = _when(e["at"]).timestamp()
        out.append(Event(max(0.0, at - started), "cap", e["detail"]))
    return out


def path_namer(site: Site) -> Callable[[str | None], str | None]:
    """The campaign path of a telemetry path label: a link's name, or the agent's
    ``LOCAL=REMOTE:PORT`` (its local address is the source's end of one path)."""
    names = {p.name for p in site.paths}
    by_local = {p.src_addr: p.name for p in site.paths}

    def name(label: str | None) -> str | None:
        if label is None or label in names:
            return label
        return by_local.get(label.partition("=")[0])

    return name


def _verified(site: Site, done: Json) -> bool:
    """Every leg verified by the agents, and the LUN equal to the source where the
    runner can read it."""
    legs_ok = all((leg.get("summary") or {}).get("verified") for leg in done["legs"])
    return bool(legs_ok) and site.lun_equals_source() is not False


def run_reservoir(
    site: Site, scenario: Scenario, repetition: int, events: tuple[Planned, ...], tick: Progress
) -> Run:
    """One repetition of a reservoir scenario; raises on failure (the runner records it)."""
    site.fresh_lun()
    timeline = Timeline(site.place, events)
    link_sampler = sampler(site.place)
    body = transfer_body(site, scenario)
    with ExitStack() as stack:
        stack.callback(timeline.restore)
        if link_sampler is not None:
            stack.enter_context(link_sampler)
        cpu0 = site.cpu_seconds()
        started = timeline.start()
        tid = site.call("POST", "/transfers", json=body)["id"]
        done = _await(site, tid, timeline, tick)
        seconds = _seconds(done, time.time() - started)
        cpu = site.cpu_seconds() - cpu0
    mss = site.paths[0].mss if site.paths else LOOPBACK_MSS
    streams = stream_records(_samples(site, tid), started, path_namer(site), mss)
    run = Run(
        scenario_record(scenario),
        repetition,
        started,
        seconds,
        site.size,
        site.size * 8 / seconds,
        cpu,
        verified=_verified(site, done),
        intervals=intervals(streams),
        streams=streams,
        events=sorted([*timeline.fired, *_cap_events(site, tid, started)], key=lambda e: e.t),
    )
    if link_sampler is not None:
        run.failover = failover(link_sampler.bins(), timeline.fired, started)
    if not run.verified:
        run.error = "the LUN differs from the source, or an agent did not verify its copy"
    return run
