"""Campaigns on registered networks (``topology.real``): a coordinator's agents, links
and volume sets, nothing emulated.

:func:`connect` resolves the topology once, before the first run, through the
coordinator's API (``--coordinator URL``, a user's token): the source and destination
agents by name or id, every link (name or id) joining them, each link's addresses at
both ends (the agents' registered NICs), and for reservoir runs the two volume sets.
Anything missing or inconsistent is one clear error naming the campaign's field, and
nothing has run yet.

The :class:`Remote` it gives is the site of every run: iperf3 runs go through the
agents' control API by way of the coordinator (``/agents/{id}/iperf/...``,
``_iperf3_remote.py``), reservoir runs are transfers (``_reservoir_run.py``), CPU time
is the agents' own (``GET /agents/{id}/info``: ``cpu_seconds``). There is no LUN to
hash here: a copy is verified by its agents (``verify``), and no link can be cut.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from reservoir.campaigns._spec import Campaign, CampaignFileError
from reservoir.campaigns._topology import Topology
from reservoir.campaigns.run.site import PathEnds, SiteError

__all__ = ["Remote", "connect"]

API_PREFIX = "/api/v1"
TIMEOUT_S = 30.0
DEFAULT_MTU = 1500  # the registry has no MTU: MSS figures assume Ethernet's
Json = dict[str, Any]


@dataclass
class Remote:
    """The registered network a real campaign runs on; also the site of its runs."""

    client: httpx.Client
    source: Json
    destination: Json
    paths: list[PathEnds]
    link_ids: dict[str, str]
    size: int = 0
    """The source volume set's capacity: what every reservoir run copies (0: no sets)."""
    body: Json = field(default_factory=dict)
    """``POST /transfers`` without streams, pacing and equalizer."""
    agent_ids: tuple[str, ...] = ()
    """Every agent a run's CPU time is read from: both ends and the sets' members."""

    place: None = None  # nothing emulated: no lab to cut links in or sample
    loopback: bool = False

    def call(self, method: str, path: str, **kw: Any) -> Any:
        """One API call; SiteError with the coordinator's reason unless 2xx."""
        try:
            r = self.client.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise SiteError(f"{method} {path}: the coordinator did not answer: {exc}") from None
        if not 200 <= r.status_code < 300:
            raise SiteError(f"{method} {path}: {r.status_code} {_detail(r)}")
        return r.json() if r.content else None

    def fresh_lun(self) -> None:
        """Nothing to clear: the transfer overwrites the destination set as a whole."""

    def lun_equals_source(self) -> bool | None:
        """None: no LUN to read here; the agents' verification stands alone."""
        return None

    def cpu_seconds(self) -> float:
        """User + system seconds of every agent of the runs, so far."""
        return sum(
            float(self.call("GET", f"/agents/{a}/info")["cpu_seconds"]) for a in self.agent_ids
        )


def _detail(r: httpx.Response) -> str:
    try:
        detail = r.json().get("detail")
    except (ValueError, AttributeError):
        return r.text[:300]
    return str(detail)[:300] if detail is not None else r.text[:300]


def _find(items: list[Json], key: str, where: str, what: str) -> Json:
    """The item whose id or name is ``key``; CampaignFileError naming ``where`` otherwise."""
    found = [i for i in items if key in (i.get("id"), i.get("name"))]
    if not found:
        names = ", ".join(sorted(str(i.get("name")) for i in items)) or "none"
        raise CampaignFileError(f"{where}: no {what} {key!r} is registered (there are: {names})")
    return found[0]


def _nic_address(agent: Json, nic: str, where: str) -> str:
    for n in agent.get("nics") or []:
        if n.get("name") == nic:
            return str(n["address"])
    raise CampaignFileError(f"{where}: agent {agent['name']} has no NIC {nic!r} registered")


def _path(link: Json, src: Json, dst: Json, where: str) -> PathEnds:
    """The link as a path from the source agent to the destination agent."""
    ends = {link["agent_a"]: link["nic_a"], link["agent_b"]: link["nic_b"]}
    if set(ends) != {src["id"], dst["id"]}:
        raise CampaignFileError(
            f"{where}: link {link['name']} does not join the source {src['name']} and the"
            f" destination {dst['name']}"
        )
    return PathEnds(
        str(link["name"]),
        _nic_address(src, ends[src["id"]], where),
        _nic_address(dst, ends[dst["id"]], where),
        float(link["capacity_bps"]),
        float(link.get("rtt_ms") or 0.0),
        DEFAULT_MTU,
        str(ends[src["id"]]),
    )


def _sets(remote: Remote, topo: Topology, campaign: Campaign) -> None:
    """The volume sets of the reservoir runs, their size against the matrix's."""
    assert topo.source_set is not None and topo.destination_set is not None
    sets: list[Json] = remote.call("GET", "/volume-sets")
    src = _find(sets, topo.source_set, "topology.real.source_set", "volume set")
    dst = _find(sets, topo.destination_set, "topology.real.destination_set", "volume set")
    if src["id"] == dst["id"]:
        raise CampaignFileError("topology.real.destination_set: the same volume set as the source")
    remote.size = int(src["capacity_bytes"])
    sizes = {sc.size_bytes for sc in campaign.scenarios() if sc.tool == "reservoir"}
    if sizes - {remote.size}:
        raise CampaignFileError(
            f"matrix.size: a reservoir run copies the whole volume set {src['name']}"
            f" ({remote.size} bytes); give size = {remote.size}"
        )
    remote.body = {
        "source": src["id"],
        "destination": dst["id"],
        "paths": [remote.link_ids[p.name] for p in remote.paths],
        "verify": True,
    }
    members = [m["agent_id"] for s in (src, dst) for m in s["members"]]
    remote.agent_ids = tuple(dict.fromkeys([*remote.agent_ids, *members]))


def resolve(client: httpx.Client, campaign: Campaign) -> Remote:
    """The campaign's topology in the coordinator's registry (CampaignFileError if not)."""
    topo = campaign.topology
    assert topo.source is not None and topo.destination is not None
    remote = Remote(client, {}, {}, [], {})
    agents: list[Json] = remote.call("GET", "/agents")
    remote.source = _find(agents, topo.source, "topology.source", "agent")
    remote.destination = _find(agents, topo.destination, "topology.destination", "agent")
    remote.agent_ids = (remote.source["id"], remote.destination["id"])
    links: list[Json] = remote.call("GET", "/links")
    for i, key in enumerate(topo.paths):
        where = f"topology.real.links[{i}]"
        link = _find(links, key, where, "link")
        remote.paths.append(_path(link, remote.source, remote.destination, where))
        remote.link_ids[str(link["name"])] = str(link["id"])
    if any(sc.tool == "reservoir" for sc in campaign.scenarios()):
        _sets(remote, topo, campaign)
    return remote


@contextmanager
def connect(campaign: Campaign, url: str, token: str | None) -> Iterator[Remote]:
    """The coordinator at ``url`` (its API under /api/v1), the topology resolved."""
    base = url.rstrip("/")
    base = base if base.endswith(API_PREFIX) else base + API_PREFIX
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=base, headers=headers, timeout=TIMEOUT_S) as client:
        try:
            remote = resolve(client, campaign)
        except SiteError as exc:
            raise CampaignFileError(f"the coordinator at {url}: {exc}") from None
        yield remote
