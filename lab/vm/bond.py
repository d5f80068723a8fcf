"""A kernel bonding device in a guest over two lab links, and the namespace's side
of it (this host's kernel has no bonding, so the bond lives in the guest).

The guest enslaves ``eth0`` and ``eth1`` to ``bond0`` (``balance-xor`` with a transmit
hash, or ``balance-rr``), with MII monitoring so a slave whose link goes down is left
out. The namespace's side plays the switch: both taps take one MAC address and one
address, and the route back to the guest is multipath over both taps hashed on
ports, so whatever slave a frame leaves by, it arrives at the same address. What the
guest sends on each slave is read from its counters (:func:`tx_bytes`); a link failing
mid-copy is :class:`LinkCut`, which also measures the throughput it cost."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from reservoir.lab.netns import ns_run
from reservoir.lab.vm.guest import Guest

__all__ = [
    "SWITCH_MAC",
    "LinkCut",
    "Samples",
    "bond",
    "join_taps",
    "leave_taps",
    "reach",
    "tx_bytes",
    "unbond",
]

SWITCH_MAC = "02:72:73:76:00:01"  # locally administered
MII_INTERVAL_MS = 100


def join_taps(ns: str, taps: Sequence[str], address: str) -> None:
    """The namespace's side of a bond: ``address`` (no prefix) on every tap, one MAC."""
    for tap in taps:
        ns_run(ns, ["ip", "link", "set", tap, "address", SWITCH_MAC], f"{tap} address")
        ns_run(ns, ["ip", "addr", "add", f"{address}/32", "dev", tap], f"{tap} {address}")
    hash_on_ports = "net.ipv4.fib_multipath_hash_policy=1"
    ns_run(ns, ["sysctl", "-qw", hash_on_ports], "multipath hash on ports")


def leave_taps(ns: str, taps: Sequence[str], address: str, peer: str, macs: Sequence[str]) -> None:
    """Undoes :func:`join_taps` and :func:`reach`: the taps with their own ``macs``
    again, without ``address``, and no route or neighbour entry for ``peer``."""
    ns_run(ns, ["ip", "route", "flush", "exact", f"{peer}/32"], f"route to {peer}")
    for tap, mac in zip(taps, macs, strict=True):
        ns_run(ns, ["ip", "neigh", "flush", "to", peer, "dev", tap], f"{peer} on {tap}")
        ns_run(ns, ["ip", "addr", "del", f"{address}/32", "dev", tap], f"{tap} {address}")
        ns_run(ns, ["ip", "link", "set", tap, "address", mac], f"{tap} address")
    ns_run(ns, ["sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=0"], "multipath hash")


def reach(ns: str, taps: Sequence[str], peer: str, mac: str) -> None:
    """``peer`` (the bond, at ``mac``) reached over every tap, flows hashed on ports.
    The neighbour entries are static: the bond answers ARP by one slave only, and a
    tap that never hears the answer would drop the flows routed by it."""
    for tap in taps:
        ns_run(ns, ["ip", "neigh", "replace", peer, "lladdr", mac, "dev", tap, "nud",
                    "permanent"], f"{peer} on {tap}")  # fmt: skip
    hops = [word for tap in taps for word in ("nexthop", "dev", tap)]
    ns_run(ns, ["ip", "route", "replace", f"{peer}/32", *hops], f"route to {peer}")


def bond(
    guest: Guest,
    mode: str,
    slaves: Sequence[str],
    address: str,
    hash_policy: str = "layer3+4",
) -> str:
    """``bond0`` in ``guest`` over ``slaves`` (their addresses removed), at ``address``
    (CIDR); its MAC. ``mode``: balance-xor (``hash_policy`` picks a slave per flow) or
    balance-rr (packets in turn)."""
    policy = f" xmit_hash_policy {hash_policy}" if mode == "balance-xor" else ""
    lines = [
        "modprobe bonding max_bonds=0",
        f"ip link add bond0 type bond mode {mode} miimon {MII_INTERVAL_MS}{policy}",
    ]
    for slave in slaves:
        lines += [
            f"ip addr flush dev {slave}",
            f"ip link set {slave} down",
            f"ip link set {slave} master bond0",
        ]
    lines += ["ip link set bond0 up", f"ip addr add {address} dev bond0"]
    lines += ["cat /sys/class/net/bond0/address"]
    return guest.check(" && ".join(lines)).strip()


def unbond(guest: Guest, addresses: dict[str, str]) -> None:
    """Removes ``bond0``; each former slave up again with its address (CIDR)."""
    lines = ["ip link del bond0"]
    for slave, address in addresses.items():
        lines += [f"ip link set {slave} up", f"ip addr replace {address} dev {slave}"]
    guest.check(" && ".join(lines))


def tx_bytes(guest: Guest, names: Sequence[str]) -> dict[str, int]:
    """Bytes each of ``names`` sent, from the guest's counters."""
    paths = " ".join(f"/sys/class/net/{n}/statistics/tx_bytes" for n in names)
    values = guest.check(f"cat {paths}").split()
    return {name: int(value) for name, value in zip(names, values, strict=True)}


SAMPLE_EVERY = 0.05  # s
RECOVERY_SPAN = 0.2  # s over which the rate must be back to count as recovered
RECOVERED = 0.5  # ... to this share of the rate before the cut


@dataclass
class Samples:
    """(seconds, bytes received) every SAMPLE_EVERY s, and when the link was cut."""

    points: list[tuple[float, int]] = field(default_factory=list)
    cut_at: float | None = None

    def peak_rate(self, span: float) -> float:
        """The most bytes/s received over any ``span`` s (0 if the samples are shorter)."""
        best = 0.0
        for i, (t0, b0) in enumerate(self.points):
            later = next(((t, b) for t, b in self.points[i:] if t >= t0 + span), None)
            if later is None:
                break
            best = max(best, (later[1] - b0) / (later[0] - t0))
        return best

    def bulk_rate(self, margin: int = 1 << 20) -> float:
        """Bytes/s between the sample where ``margin`` bytes had come in and the last
        one ``margin`` short of the total: the bulk of a copy, without its log-in and
        its verification (0 if there is no such stretch)."""
        if not self.points:
            return 0.0
        first, last = self.points[0][1], self.points[-1][1]
        inner = [(t, b) for t, b in self.points if first + margin <= b <= last - margin]
        if len(inner) < 2 or inner[-1][0] <= inner[0][0]:
            return 0.0
        return (inner[-1][1] - inner[0][1]) / (inner[-1][0] - inner[0][0])

    def lost_window(self) -> float | None:
        """Seconds from the cut until a RECOVERY_SPAN s span carries RECOVERED of the
        mean rate before the cut (None: no cut, or no recovery seen)."""
        if self.cut_at is None:
            return None
        before = [(t, b) for t, b in self.points if t <= self.cut_at]
        moving = [(t, b) for t, b in before if b > before[0][1]]
        if len(moving) < 2:
            return None
        rate = (moving[-1][1] - moving[0][1]) / (moving[-1][0] - moving[0][0])
        after = [(t, b) for t, b in self.points if t >= self.cut_at]
        for i, (t0, b0) in enumerate(after):
            later = next(((t, b) for t, b in after[i:] if t >= t0 + RECOVERY_SPAN), None)
            if later is None:
                return None
            if (later[1] - b0) / (later[0] - t0) >= RECOVERED * rate:
                return t0 - self.cut_at
        return None


class LinkCut(threading.Thread):
    """Samples what the namespace receives on ``taps`` and, with a ``link`` (tap,
    guest slave), once ``after`` bytes more came in, cuts that link at both ends, as a
    failed cable would: the tap goes down (the namespace routes around it, as a switch
    stops using a dead port) and the guest's slave goes down (its bond's MII
    monitoring sees it). Without a ``link`` it only samples. :meth:`finish` stops
    sampling and gives the samples."""

    def __init__(
        self,
        ns: str,
        taps: Sequence[str],
        guest: Guest,
        link: tuple[str, str] | None = None,
        after: int = 0,
    ) -> None:
        super().__init__(daemon=True)
        self.ns, self.taps, self.guest, self.link, self.after = ns, list(taps), guest, link, after
        self.samples = Samples()
        self._done = threading.Event()

    def _received(self) -> int:
        paths = [f"/sys/class/net/{tap}/statistics/rx_bytes" for tap in self.taps]
        return sum(int(v) for v in ns_run(self.ns, ["cat", *paths], "tap counters").split())

    def run(self) -> None:
        base = self._received()
        while not self._done.wait(SAMPLE_EVERY):
            now, got = time.monotonic(), self._received() - base
            self.samples.points.append((now, got))
            if self.link is not None and self.samples.cut_at is None and got >= self.after:
                tap, slave = self.link
                self.samples.cut_at = time.monotonic()
                ns_run(self.ns, ["ip", "link", "set", tap, "down"], f"cut {tap}")
                self.guest.check(f"ip link set {slave} down")

    def finish(self) -> Samples:
        self._done.set()
        self.join(timeout=30)
        return self.samples
