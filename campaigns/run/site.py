"""Where a campaign's runs happen: the lab (or, for loopback, one namespace of its own),
the addresses of each path, and for reservoir runs the agents and the coordinator.

A lab topology: every path is a link between the source and the destination host;
the source agent has one NIC per path (the link's device, named after the link), the
destination agent's builtin target serves one LUN on its address of every path, and
the coordinator runs in the source host. Loopback: one namespace with only ``lo``,
both agents and the coordinator on 127.0.0.1, no paths.

:class:`Site` registers the agents, a volume set on each side (one member) and the
path links with the coordinator, and gives the body of ``POST /transfers``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from reservoir.campaigns._spec import CampaignFileError
from reservoir.campaigns._topology import Topology
from reservoir.campaigns.errors import CampaignError
from reservoir.lab import spec as labspec
from reservoir.lab.bench_copy import (
    Source,
    file_digest,
    make_lun,
    proc_cpu_seconds,
    write_source,
)
from reservoir.lab.coord_site import AgentProc, Coordinator, inside, site_credentials
from reservoir.lab.network import Lab
from reservoir.lab.peers import PeerError

__all__ = ["PathEnds", "Paths", "Place", "Site", "SiteError", "place", "site"]

LOOPBACK_HOST = "local"
LOOPBACK_ADDR = "127.0.0.1"
UNSHAPED_BPS = 10_000_000_000  # a link without a rate limit is registered at 10 Gbit/s
SRC_PORT, DST_PORT = 8471, 8473
IQN = "iqn.2026-11.org.reservoir:campaign"
STRIPE_UNIT = 8 << 20
Json = dict[str, Any]


class SiteError(CampaignError):
    """The coordinator refused a registration, or a process did not start."""


@dataclass(frozen=True)
class PathEnds:
    """One path: the link's name, the source's and destination's addresses on it."""

    name: str
    src_addr: str
    dst_addr: str
    rate_bps: float  # 0: not shaped
    rtt_ms: float
    mtu: int
    src_nic: str | None = None
    """The source's NIC on the path; None: the link's name (a lab's devices)."""

    @property
    def nic(self) -> str:
        return self.src_nic or self.name

    @property
    def mss(self) -> int:
        return self.mtu - 52  # IPv4 + TCP with timestamps


class Paths(Protocol):
    """Where runs go: a lab's :class:`Place`, or a registered network (``remote.py``)."""

    @property
    def paths(self) -> list[PathEnds]: ...
    @property
    def loopback(self) -> bool: ...


@dataclass
class Place:
    """The built lab, its source and destination hosts, and the paths between them."""

    lab: Lab
    source: str
    destination: str
    paths: list[PathEnds]

    @property
    def src_ns(self) -> str:
        return self.lab.ns(self.source)

    @property
    def dst_ns(self) -> str:
        return self.lab.ns(self.destination)

    @property
    def loopback(self) -> bool:
        return not self.paths


def path_ends(spec: labspec.Spec, topo: Topology) -> list[PathEnds]:
    """The paths of a lab topology; CampaignFileError for a path that does not join the
    source and the destination directly (the runner reaches the destination over each
    path's own link)."""
    assert topo.source is not None and topo.destination is not None
    ends = []
    for name in topo.paths:
        link = spec.link(name)
        other = link.b if link.a == topo.source else link.a
        if other != topo.destination:
            raise CampaignFileError(
                f"topology.paths: link {name} joins {topo.source} and {other}; the runner"
                f" needs every path to join the source and the destination {topo.destination}"
            )
        ends.append(
            PathEnds(
                name,
                str(link.near_end(topo.source).ip),
                str(link.near_end(topo.destination).ip),
                link.rate_mbit * 1e6,
                2 * link.delay_ms,
                link.mtu,
            )
        )
    return ends


@contextmanager
def place(topo: Topology, spec: labspec.Spec | None) -> Iterator[Place]:
    """The lab of ``spec`` up (loopback: a namespace with ``lo`` only), torn down after,
    also on failure."""
    if topo.kind == "real":
        raise CampaignFileError(
            "topology.real: running on registered agents and links is not built yet;"
            " use a lab or loopback topology"
        )
    if topo.kind == "loopback" or spec is None:
        with Lab(labspec.Spec((labspec.Host(LOOPBACK_HOST),), ())) as lab:
            yield Place(lab, LOOPBACK_HOST, LOOPBACK_HOST, [])
        return
    assert topo.source is not None and topo.destination is not None
    paths = path_ends(spec, topo)
    with Lab(spec) as lab:
        p = Place(lab, topo.source, topo.destination, paths)
        if len(paths) > 1:
            _mptcp_endpoints(p)
        yield p


def _mptcp_endpoints(p: Place) -> None:
    """MPTCP over every path: subflow limits in both hosts, and the destination
    signalling its addresses on the paths after the first (the initiator connects to
    the first). Plain TCP is not affected."""
    n = str(len(p.paths))
    for host in (p.source, p.destination):
        p.lab.exec(host, ["ip", "mptcp", "limits", "set", "subflow", n, "add_addr_accepted", n])
    for pe in p.paths[1:]:
        argv = ["ip", "mptcp", "endpoint", "add", pe.dst_addr, "dev", pe.name, "signal"]
        p.lab.exec(p.destination, argv)


def _ok(r: httpx.Response) -> Any:
    if r.status_code not in (200, 201):
        raise SiteError(f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text[:300]}")
    return r.json()


@dataclass
class Site:
    """Agents and coordinator for reservoir runs of one volume size."""

    place: Place
    work: Path
    size: int
    source: Source
    lun: Path
    src: AgentProc
    dst: AgentProc
    coordinator: Coordinator
    body: Json = field(default_factory=dict)
    """``POST /transfers`` without streams, pacing and equalizer."""
    link_ids: dict[str, str] = field(default_factory=dict)

    @property
    def agents(self) -> list[AgentProc]:
        return [self.src, self.dst]

    @property
    def paths(self) -> list[PathEnds]:
        return self.place.paths

    def cpu_seconds(self) -> float:
        """Both agents' user + system seconds so far."""
        return sum(proc_cpu_seconds(a.proc.pid) for a in self.agents if a.proc is not None)

    def client(self) -> httpx.Client:
        return self.coordinator.client()

    def call(self, method: str, path: str, **kw: Any) -> Any:
        """One API call from inside the source's namespace; SiteError unless 2xx."""
        with inside(self.place.src_ns), self.client() as c:
            return _ok(c.request(method, path, **kw))

    def fresh_lun(self) -> None:
        """Zero the LUN file in place (the target keeps it open)."""
        with open(self.lun, "r+b") as f:
            f.truncate(0)
            f.truncate(self.size)
            os.fsync(f.fileno())

    def lun_equals_source(self) -> bool | None:
        return file_digest(self.lun) == self.source.digest

    def stop(self) -> None:
        self.coordinator.stop()
        for a in self.agents:
            a.stop()


def _agents(p: Place, work: Path, source: Path, lun: Path) -> tuple[AgentProc, AgentProc]:
    creds = site_credentials(work)  # those of work's coordinator
    src_addr = p.paths[0].src_addr if p.paths else LOOPBACK_ADDR
    dst_addr = p.paths[0].dst_addr if p.paths else LOOPBACK_ADDR
    portals = tuple(pe.dst_addr for pe in p.paths) or (LOOPBACK_ADDR,)
    src = AgentProc(p.lab, "src", "agent", src_addr, SRC_PORT, work, creds, source, host=p.source)
    dst = AgentProc(
        p.lab, "dst", "agent", dst_addr, DST_PORT, work, creds, lun, IQN, portals=portals,
        host=p.destination, target_mptcp=len(p.paths) > 1,
    )  # fmt: skip
    return src, dst


def _nics(p: Place, role: str) -> list[Json]:
    if not p.paths:
        return [{"name": "lo", "address": LOOPBACK_ADDR, "speed_bps": UNSHAPED_BPS}]
    return [
        {
            "name": pe.name,
            "address": pe.src_addr if role == "src" else pe.dst_addr,
            "speed_bps": int(pe.rate_bps) or UNSHAPED_BPS,
        }
        for pe in p.paths
    ]


def _register(c: httpx.Client, s: Site) -> None:
    ids = {}
    for a in s.agents:
        volume: Json = {"name": "v0", "size_bytes": s.size}
        if a.role == "src":
            volume["path"] = str(a.data.resolve())  # as in the agent's source_volumes
        else:
            volume.update(iqn=a.iqn, lun=0, portal=a.portal)
        body: Json = {
            "name": a.name,
            "control_url": a.url,
            "nics": _nics(s.place, a.role),
            "volumes": [volume],
        }
        ids[a.role] = _ok(c.post("/agents", json=body))["id"]
    sets = {}
    for role in ("src", "dst"):
        members = [{"agent_id": ids[role], "volume": "v0"}]
        body = {"name": f"{role}-set", "members": members, "stripe_unit": STRIPE_UNIT}
        sets[role] = _ok(c.post("/volume-sets", json=body))["id"]
    for pe in s.place.paths:
        body = {
            "name": pe.name,
            "agent_a": ids["src"],
            "nic_a": pe.name,
            "agent_b": ids["dst"],
            "nic_b": pe.name,
            "capacity_bps": int(pe.rate_bps) or UNSHAPED_BPS,
            "rtt_ms": pe.rtt_ms,
        }
        s.link_ids[pe.name] = _ok(c.post("/links", json=body))["id"]
    s.body = {
        "source": sets["src"],
        "destination": sets["dst"],
        "paths": [s.link_ids[pe.name] for pe in s.place.paths],
        "verify": True,
    }


@contextmanager
def site(p: Place, work: Path, size: int) -> Iterator[Site]:
    """A source file of ``size`` random bytes and an empty LUN, both agents and the
    coordinator started and registered; all stopped (by PID) after, also on failure."""
    folder = work / f"site-{p.lab.prefix}-{size}"  # a lab of its own: a fresh coordinator
    folder.mkdir(parents=True, exist_ok=True)
    source = write_source(folder / "source.img", size, 0)
    lun = make_lun(folder / "lun.img", size)
    src, dst = _agents(p, folder, source.path, lun)
    coordinator = Coordinator(p.lab, src.addr, folder, host=p.source)
    s = Site(p, folder, size, source, lun, src, dst, coordinator)
    try:
        with inside(p.src_ns):  # where the health checks reach every process
            for a in s.agents:
                a.start()
            coordinator.start()
            with s.client() as c:
                _register(c, s)
        yield s
    except PeerError as e:
        raise SiteError(str(e)) from e
    finally:
        s.stop()
        for f in (source.path, lun):
            f.unlink(missing_ok=True)
