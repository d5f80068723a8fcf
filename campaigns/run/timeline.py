"""What happens around every run: the campaign's link events fired at their times, the
per-link wire counters sampled, the pacing rates. (The congestion control is set per
socket: iperf3's ``-C``, the transfer's ``congestion``; a child namespace may only
make a default of what the host allows, which excludes cubic here.)"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from reservoir.campaigns._scenario import Event as Planned
from reservoir.campaigns._scenario import Scenario
from reservoir.campaigns.results import Event, EventKind
from reservoir.campaigns.run.site import Paths, Place
from reservoir.lab.lfn_sampling import LinkSampler, link_devices

__all__ = ["PAYLOAD", "Timeline", "nic_rates", "sampler"]

PAYLOAD = 1448 / 1514  # TCP payload per frame at MTU 1500: per-socket rates count payload
MARGIN = 0.05  # the pacing plan's default margin (server/app/models.py PacingBase)


@dataclass
class Timeline:
    """Fires ``planned`` link events at their ``at_s`` after :meth:`start`; records
    them as run events; :meth:`restore` brings up whatever is still down."""

    place: Place | None  # None: nothing emulated, and no events (the campaign's check)
    planned: tuple[Planned, ...]
    started: float = 0.0
    fired: list[Event] = field(default_factory=list)
    _next: int = 0
    _down: set[str] = field(default_factory=set)

    def start(self) -> float:
        self.started = time.time()
        self._next = 0
        return self.started

    def poll(self) -> None:
        order = sorted(self.planned, key=lambda e: e.at_s)
        now = time.time() - self.started
        while self._next < len(order) and order[self._next].at_s <= now:
            self._fire(order[self._next])
            self._next += 1

    def _fire(self, e: Planned) -> None:
        assert self.place is not None, "link events need a lab"
        if e.action == "link-down":
            self.place.lab.link_down(e.link)
            self._down.add(e.link)
        else:
            self.place.lab.link_up(e.link)
            self._down.discard(e.link)
        kind: EventKind = "link-down" if e.action == "link-down" else "link-up"
        self.fired.append(Event(time.time() - self.started, kind, e.link))

    def restore(self) -> None:
        for link in sorted(self._down):
            assert self.place is not None
            self.place.lab.link_up(link)
        self._down.clear()


def sampler(place: Place | None) -> LinkSampler | None:
    """The source's per-path wire counters (None on loopback, and without a lab)."""
    if place is None or place.loopback:
        return None
    addrs = {p.name: p.src_addr for p in place.paths}
    return LinkSampler(place.src_ns, link_devices(place.src_ns, addrs))


def nic_rates(place: Paths, scenario: Scenario) -> dict[str, float]:
    """The pacing rate of each path's NIC (bit/s of frames) for a paced scenario: the
    scenario's rate, or the plan's (the link's capacity less MARGIN); {} when off."""
    if scenario.pacing == "off" or place.loopback:
        return {}
    if scenario.pacing_rate_bps is not None:
        return {p.name: scenario.pacing_rate_bps for p in place.paths}
    return {p.name: p.rate_bps * (1 - MARGIN) for p in place.paths if p.rate_bps > 0}
