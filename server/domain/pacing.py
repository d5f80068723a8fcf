"""The pacing plan of a transfer (design 3.3): rates per NIC and per stream, sent to
the source agents with each copy (``caps`` of ``POST /copies``).

For one agent copy over the links ``L1..Lk`` of its leg (its paths, in order):

- each link's share of the transfer is its declared capacity divided by the number
  of the transfer's copies that use it (two source members on one agent pair split
  their link);
- the NIC of the source agent on a link gets the sum of its links' shares, at most its
  own line rate, times ``1 - margin`` (the transfer's ``pacing.margin``, 5% by
  default: staying under the share keeps the bottleneck queue short), computed by
  :class:`reservoir.pacing.PacingPlan`;
- stream ``i`` of the copy runs on the link :func:`placement` gives it (``i mod k``
  over links of equal capacity, in proportion to capacity otherwise: the copy's
  paths then name one path a stream, and the engine runs stream ``i`` on path ``i``),
  and a stream's rate is its NIC's rate split evenly over the NIC's streams.

``pacing.policy`` says which of these the agent applies: ``per-nic`` gives
``nic_pacing_rates`` (a root qdisc per NIC while the copy runs), ``per-socket``
gives ``stream_pacing_rates`` (SO_MAX_PACING_RATE on every stream), ``off`` nothing.
A NIC's qdisc counts whole Ethernet frames while TCP's own pacing counts the payload
it sends (measured: tests/netlab/test_pacing_agent.py), so a stream's rate is its
part of the NIC rate times ``1448 / 1514`` (payload per frame at MTU 1500).
A transfer that took its links' NIC pacing from their probes (``probe.py``,
``recommendation_applied``) paces each source NIC at the probed rate instead (split
among the copies sharing the link), or not at all where the probe found unpaced best.
A copy striped over several destinations has no links of its own (each destination
is reached at its URL): it is not paced. Rates are bytes per second, as the agent's
caps take them. The equalizer's cwnd caps are pushed later on top of these
(``equalizer_loop.py`` keeps them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from reservoir.common.pacing_plan import NicSpec, PacingPlan, StreamSpec
from reservoir.common.placement import placement
from reservoir.server.app.models import PacingPolicy
from reservoir.server.app.tables import Agent, Link
from reservoir.server.domain.errors import VolumeError
from reservoir.server.domain.probe import recommended_nic_rates

__all__ = ["PAYLOAD_PER_FRAME", "copy_caps", "link_sharing"]

PAYLOAD_PER_FRAME = 1448 / 1514  # TCP payload (timestamps on) per Ethernet frame, MTU 1500


def link_sharing(copies_links: Iterable[Sequence[str]]) -> Counter[str]:
    """How many of a transfer's copies use each link (by id)."""
    return Counter(link_id for links in copies_links for link_id in set(links))


def source_nic(link: Link, agent: Agent) -> str:
    """The NIC of ``agent`` (the source) on ``link``."""
    return link.nic_a if link.agent_a_id == agent.id else link.nic_b


def _nic_speed(agent: Agent, name: str) -> float:
    for nic in agent.nics:
        if nic.name == name:
            return float(nic.speed_bps)
    raise VolumeError(f"agent {agent.name!r} has no NIC {name!r}")


def plan_for(
    links: Sequence[Link],
    agent: Agent,
    streams: int,
    margin: float,
    sharing: Mapping[str, int],
) -> PacingPlan:
    """The pacing plan of one copy: the source agent's NICs on ``links`` and its streams."""
    shares: dict[str, float] = {}
    for link in links:
        nic = source_nic(link, agent)
        shares[nic] = shares.get(nic, 0.0) + link.capacity_bps / max(1, sharing.get(link.id, 1))
    total = sum(shares.values())
    nics = [
        NicSpec(name, capacity_bps=_nic_speed(agent, name), share=bps / total)
        for name, bps in shares.items()
    ]
    path_nics = [source_nic(link, agent) for link in links]
    on = placement([link.capacity_bps for link in links], streams)
    stream_specs = [StreamSpec(str(i), path_nics[on[i]]) for i in range(streams)]
    return PacingPlan(nics, stream_specs, bottleneck_bps=total, margin=1 - margin)


def copy_caps(
    policy: str,
    margin: float,
    links: Sequence[Link],
    agent: Agent,
    *,
    streams: int,
    sharing: Mapping[str, int],
    recommended: Mapping[str, Mapping[str, int | None]] | None = None,
) -> dict[str, Any] | None:
    """The ``caps`` of a copy's request under ``policy``; None when nothing is paced.
    ``recommended``: link id -> side -> bits/s, the probed NIC rates the transfer took."""
    if policy == PacingPolicy.OFF.value or not links:
        return None
    plan = plan_for(links, agent, streams, margin, sharing)
    if policy == PacingPolicy.PER_SOCKET.value:
        rates = {s: int(bps * PAYLOAD_PER_FRAME) // 8 for s, bps in plan.stream_rates().items()}
        return {"stream_pacing_rates": rates}
    nic_rates: dict[str, int | None] = dict(plan.nic_rates())
    if recommended:
        nic_rates |= recommended_nic_rates(links, agent.id, sharing, recommended)
    paced = {n: bps // 8 for n, bps in nic_rates.items() if bps is not None}
    if not paced:
        return None
    flows = Counter(stream.nic for stream in plan.streams)  # fq paces each flow
    return {"nic_pacing_rates": paced, "nic_pacing_flows": {n: flows[n] or 1 for n in paced}}
