"""From a transfer's legs to the copies its source agents run (``POST /copies`` bodies).

One agent copy per source member: it reads the member's first ``sum(leg bytes)``
bytes (``range`` from 0) from the member's local ``path`` (or its own portal) and
writes them

- to one destination member when the sets have as many members (one leg);
- striped over its ``k = nd / ns`` destination members otherwise, in the order the
  stripe deals them: source member ``i`` feeds destination members
  ``i, i + ns, ..., i + (k - 1) ns`` (``legs.check_supported`` explains why), with
  the sets' stripe unit. Those legs share the copy.

How a destination volume becomes a URL (:func:`volume_url`): it must be registered
with ``iqn`` and ``lun``; its host and port are the volume's ``portal`` if given,
else the agent's first NIC address and port 3260:
``iscsi://HOST:PORT/IQN/LUN``.

Paths (one destination only, the engine reaches several destinations at their own
URLs): each link of the leg gives ``LOCAL=REMOTE:PORT`` with the source agent's NIC
address on that link, the destination agent's NIC address on it and the portal's port;
one entry per stream, the links dealt in proportion to their capacities
(``placement.py``), so the agent runs stream i on ``paths[i]``.
Such a copy also carries the transfer's pacing plan as its initial ``caps``
(``pacing.py``).

The copy's id is chosen here, ``<transfer id>-leg<first leg index>``: creating it
is idempotent on the agent, and a copy the agent lost is created again under the
same id and resumes from its checkpoint if the agent kept it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from reservoir.common.placement import placement
from reservoir.server.app.agent_client import AgentRef
from reservoir.server.app.tables import Agent, AgentVolume, Link, Transfer, TransferLeg, VolumeSet
from reservoir.server.domain.errors import VolumeError
from reservoir.server.domain.pacing import copy_caps, link_sharing

__all__ = [
    "ISCSI_PORT",
    "CopyPlan",
    "VolumeError",
    "agent_ref",
    "copy_id",
    "extent_size",
    "plan_copies",
    "plan_transfer",
    "portal",
    "volume_url",
]

ISCSI_PORT = 3260
MiB = 1 << 20
MIN_EXTENT, MAX_EXTENT = 1 * MiB, 64 * MiB
EXTENTS_PER_STREAM = 16


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """One agent copy: the legs it carries and the request that starts it."""

    copy_id: str
    agent: AgentRef
    leg_ids: tuple[int, ...]
    leg_bytes: tuple[int, ...]
    request: dict[str, Any]
    link_ids: tuple[str, ...] = ()  # its links, in order: stream i on placement(...)[i]

    @property
    def bytes(self) -> int:
        return sum(self.leg_bytes)


def agent_ref(agent: Agent) -> AgentRef:
    return AgentRef(agent.id, agent.name, agent.control_url, agent.credentials_generation)


def copy_id(transfer_id: str, first_leg: int) -> str:
    return f"{transfer_id}-leg{first_leg}"


def extent_size(stripe_unit: int, length: int, streams: int) -> int:
    """The stripe unit (a striped copy cuts extents at stripe-unit boundaries anyway),
    but at most the power-of-two MiB that deals every stream ``EXTENTS_PER_STREAM``
    extents, and between 1 and 64 MiB. A copy ends waiting on the last extent or two
    of its slowest streams: with 1 GiB over 32 streams at 1e-4 loss, 8 MiB extents
    (4 a stream, 4.8 s each at 14 Mbit/s) left half the copy to that tail. Smaller
    extents come with many streams, whose shares of a path are small, so the two
    extents a stream keeps in flight still cover its share of the path's BDP."""
    per_stream = length // max(1, streams * EXTENTS_PER_STREAM)
    fit = MIN_EXTENT
    while fit * 2 <= per_stream:
        fit *= 2
    return max(MIN_EXTENT, min(MAX_EXTENT, stripe_unit, fit))


def _host(text: str) -> str:
    return f"[{text}]" if ":" in text and not text.startswith("[") else text


def portal(volume: AgentVolume) -> tuple[str, int]:
    """(host, port) of the target serving ``volume``."""
    if volume.portal:
        host, _, port = volume.portal.rpartition(":")
        return host.strip("[]"), int(port)
    if not volume.agent.nics:
        raise VolumeError(
            f"volume {volume.name!r} of agent {volume.agent.name!r} has no portal and the "
            "agent no NIC address: register the volume with a portal (HOST:PORT)"
        )
    return volume.agent.nics[0].address, ISCSI_PORT


def volume_url(volume: AgentVolume) -> str:
    """``iscsi://HOST:PORT/IQN/LUN`` of a volume served by its agent's target."""
    if volume.iqn is None or volume.lun is None:
        raise VolumeError(
            f"volume {volume.name!r} of agent {volume.agent.name!r} is not served over "
            "iSCSI: a destination volume needs iqn and lun (and a portal)"
        )
    host, port = portal(volume)
    return f"iscsi://{_host(host)}:{port}/{volume.iqn}/{volume.lun}"


def source_location(volume: AgentVolume) -> str:
    """What the source agent reads: its local path, or the volume's own portal."""
    return volume.path if volume.path is not None else volume_url(volume)


def _nic_address(agent: Agent, nic: str) -> str:
    for n in agent.nics:
        if n.name == nic:
            return n.address
    raise VolumeError(f"agent {agent.name!r} has no NIC {nic!r}")


def link_paths(links: Iterable[Link], source: AgentVolume, dest: AgentVolume) -> list[str]:
    """``LOCAL=REMOTE:PORT`` per link, local on the source agent's side."""
    port = portal(dest)[1]
    out = []
    for link in links:
        if link.agent_a_id == source.agent_id:
            local, remote = (link.agent_a_id, link.nic_a), (link.agent_b_id, link.nic_b)
        else:
            local, remote = (link.agent_b_id, link.nic_b), (link.agent_a_id, link.nic_a)
        local_addr = _nic_address(source.agent, local[1])
        remote_addr = _nic_address(dest.agent, remote[1])
        out.append(f"{local_addr}={_host(remote_addr)}:{port}")
    return out


def _groups(legs: Iterable[TransferLeg]) -> list[list[TransferLeg]]:
    """The legs by source member, in leg order (hence destination member order)."""
    groups: dict[int, list[TransferLeg]] = {}
    for leg in sorted(legs, key=lambda leg: leg.index):
        groups.setdefault(leg.source_volume_id, []).append(leg)
    return list(groups.values())


def _request(
    transfer: Transfer,
    legs: list[TransferLeg],
    stripe_unit: int,
    links: Mapping[str, Link],
    sharing: Mapping[str, int],
) -> dict[str, Any]:
    first, total = legs[0], sum(leg.bytes for leg in legs)
    dests = [volume_url(leg.dest_volume) for leg in legs]
    body: dict[str, Any] = {
        "id": copy_id(transfer.id, first.index),
        "source": source_location(first.source_volume),
        "dest": dests[0] if len(dests) == 1 else dests,
        "streams": first.streams,
        "extent_size": extent_size(stripe_unit, total, first.streams * len(legs)),
        "verify": transfer.verify,
        "range": {"offset": 0, "length": total},
    }
    if transfer.congestion is not None:
        body["congestion"] = transfer.congestion
    if transfer.verification != "storage":  # storage, the agents' default, is left out:
        body["verification"] = transfer.verification  # agents before the field refuse it
    mptcp = transfer.multilink == "mptcp"
    if mptcp:
        body["mptcp"] = True  # one portal; the kernel opens the subflows over the links
    if len(dests) > 1:
        body["stripe_unit"] = stripe_unit
    else:
        chosen = [links[i] for i in _chosen(legs, links)]
        if not mptcp:
            paths = link_paths(chosen, first.source_volume, first.dest_volume)
            on = placement([link.capacity_bps for link in chosen], first.streams)
            dealt = on != [i % len(paths) for i in range(len(on))]
            body["paths"] = [paths[i] for i in on] if dealt else paths
        caps = copy_caps(
            transfer.pacing_policy,
            transfer.pacing_margin,
            chosen,
            first.source_volume.agent,
            streams=first.streams,
            sharing=sharing,
            recommended=(transfer.recommendation_applied or {}).get("nic_pacing_bps"),
        )
        if caps is not None:
            body["caps"] = caps
    return body


def _chosen(legs: list[TransferLeg], links: Mapping[str, Link]) -> tuple[str, ...]:
    return tuple(i for i in legs[0].link_ids if i in links)


def plan_copies(transfer: Transfer, stripe_unit: int, links: Mapping[str, Link]) -> list[CopyPlan]:
    """The agent copies of ``transfer``; raises :class:`VolumeError`."""
    plans = []
    groups = _groups(transfer.legs)
    sharing = link_sharing(legs[0].link_ids for legs in groups if len(legs) == 1)
    for legs in groups:
        request = _request(transfer, legs, stripe_unit, links, sharing)
        plans.append(
            CopyPlan(
                copy_id=request["id"],
                agent=agent_ref(legs[0].source_volume.agent),
                leg_ids=tuple(leg.id for leg in legs),
                leg_bytes=tuple(leg.bytes for leg in legs),
                request=request,
                link_ids=_chosen(legs, links) if "paths" in request else (),
            )
        )
    return plans


def plan_transfer(session: Session, transfer: Transfer) -> list[CopyPlan]:
    """:func:`plan_copies` with the transfer's source set and links read from the
    database; raises :class:`VolumeError`."""
    vset = session.get(VolumeSet, transfer.source_set_id)
    assert vset is not None  # RESTRICT: a set in use cannot be deleted
    link_ids = {i for leg in transfer.legs for i in leg.link_ids}
    links = {i: link for i in link_ids if (link := session.get(Link, i)) is not None}
    return plan_copies(transfer, vset.stripe_unit, links)
