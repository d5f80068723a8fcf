"""Probing a link: measure it with iperf3 through its two agents, then recommend how
transfers over it should run (``POST /api/v1/links/{id}/probe``).

A probe runs, for each direction asked (``a-to-b``: agent_a sends from nic_a to
agent_b's nic_b; ``b-to-a`` the other way), one short iperf3 test per stream count
(1, 4, 8, 16 by default) unpaced and at each pacing rate (0.95 x the link's capacity
by default), the sending NIC paced by its agent's NIC pacer for the run. Each test is a
one-shot iperf3 server on the receiving agent bound to its NIC's address, and a client
run on the sending agent bound to its own (``agent/control/iperf.py``), polled to its
result. The runs go one after another: they would share the link otherwise.

From the runs, :func:`recommend` picks the streams and the pacing of each sending NIC,
which :func:`apply_recommendation` gives to transfers over the link that leave them
open. A probe is a task of the coordinator's loop; the link shows it (``running``,
``completed``, ``failed`` with its error). A probe that fails, an agent that does not
answer, an iperf3 that is missing, changes nothing else on the link: the last completed
probe's recommendation and measurements stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from reservoir.server.app.agent_client import AgentError, AgentRef
from reservoir.server.app.errors import ConflictError, InvalidRequestError
from reservoir.server.app.models import ProbeCreate, ProbeRunPublic, TransferCreate
from reservoir.server.app.tables import Agent, Link, utcnow
from reservoir.server.domain.errors import DomainError

__all__ = [
    "TOLERANCE",
    "IperfAgents",
    "LinkProber",
    "ProbeError",
    "Recommendation",
    "apply_recommendation",
    "recommend",
]

log = logging.getLogger("reservoir.server.domain.probe")

TOLERANCE = 0.03  # a stream count within 3% of the best aggregate is as good
RUN_SLACK = 60.0  # seconds beyond a run's duration before the probe gives up on it
SIDE = {"a-to-b": "a", "b-to-a": "b"}  # the sending side of a direction
Json = dict[str, Any]


class ProbeError(DomainError):
    """A run of the probe went wrong (iperf3's own error, a run that never ended)."""


class IperfAgents(Protocol):
    """What a probe needs of the agents: :class:`HttpAgentClient`, or a fake."""

    async def iperf(
        self, agent: AgentRef, method: str, path: str, body: Json | None = None
    ) -> Json: ...

    async def aclose(self) -> None: ...


# ---------------------------------------------------------------- the rule


@dataclass(frozen=True)
class Recommendation:
    streams: int
    nic_pacing_bps: dict[str, int | None]  # side (a, b) -> bits/s; None: unpaced


def _direction_choice(runs: Sequence[ProbeRunPublic]) -> tuple[int, int | None]:
    """(streams, pacing) for one direction, by the rule of :func:`recommend`."""
    usable = [r for r in runs if r.pacing_bps is None or r.nic_paced is not False]
    best = max(r.bits_per_second for r in usable)
    good = [r for r in usable if r.bits_per_second >= (1 - TOLERANCE) * best]
    streams = min(r.streams for r in good)
    at = [r for r in good if r.streams == streams]
    chosen = min(at, key=lambda r: (r.retransmits or 0, -r.bits_per_second))
    return streams, chosen.pacing_bps


def recommend(runs: Sequence[ProbeRunPublic]) -> Recommendation:
    """The recommendation of a probe's runs.

    For each direction: the best aggregate goodput of its runs (paced or not) sets the
    bar; the runs within :data:`TOLERANCE` (3%) of it are as good. More streams cost
    memory, connections and fairness, so the direction's stream count is the smallest
    among them. Among those good runs at that stream count, the sending NIC's pacing is
    the one with the fewest retransmits (a NIC paced under the bottleneck keeps its
    queue short: fewer losses for the same goodput), ties going to the higher goodput;
    ``None`` (unpaced) when the unpaced run wins. A paced run whose NIC the agent could
    not pace counts as nothing. The link's stream count is the larger of its
    directions' (a transfer's streams serve both); each sending NIC keeps its own
    direction's pacing. Raises ValueError without runs.
    """
    by_direction: dict[str, list[ProbeRunPublic]] = {}
    for run in runs:
        by_direction.setdefault(run.direction, []).append(run)
    if not by_direction:
        raise ValueError("no runs to recommend from")
    streams, pacing = 0, {}
    for direction, group in sorted(by_direction.items()):
        n, rate = _direction_choice(group)
        streams = max(streams, n)
        pacing[SIDE[direction]] = rate
    return Recommendation(streams, pacing)


# ---------------------------------------------------------------- transfers


def _side(link: Link, agent_id: str) -> str:
    return "a" if link.agent_a_id == agent_id else "b"


def apply_recommendation(body: TransferCreate, links: Sequence[Link]) -> Json | None:
    """What a new transfer over ``links`` takes from their probes: the streams when the
    request names none (the largest of the links' recommendations), the NIC pacing rates
    when the request says nothing of pacing. ``None``: nothing taken. The result is
    stored on the transfer (``recommendation_applied``) and read by ``leg_copies.py``."""
    probed = [link for link in links if link.recommended_streams is not None]
    if not probed:
        return None
    applied: Json = {"streams_per_pair": None, "nic_pacing_bps": {}, "links": []}
    if "streams_per_pair" not in body.model_fields_set:
        applied["streams_per_pair"] = max(link.recommended_streams or 1 for link in probed)
    if not body.pacing.model_fields_set:
        applied["nic_pacing_bps"] = {
            link.id: dict(link.recommended_pacing or {})
            for link in probed
            if link.recommended_pacing
        }
    if applied["streams_per_pair"] is None and not applied["nic_pacing_bps"]:
        return None
    applied["links"] = [link.id for link in probed]
    return applied


def recommended_nic_rates(
    links: Sequence[Link],
    agent_id: str,
    sharing: Mapping[str, int],
    recommended: Mapping[str, Mapping[str, int | None]],
) -> dict[str, int | None]:
    """Bits/s per source NIC from the links' recommendations, each link's rate split
    among the transfer's copies that use it (``None``: the probe said unpaced). A NIC
    with a link without a recommendation for this direction is left out (the pacing
    plan decides it)."""
    out: dict[str, int | None] = {}
    missing: set[str] = set()
    for link in links:
        side = _side(link, agent_id)
        nic = link.nic_a if side == "a" else link.nic_b
        rates = recommended.get(link.id) or {}
        if side not in rates:
            missing.add(nic)
            continue
        rate = rates[side]
        if rate is None:
            out.setdefault(nic, None)
            continue
        share = rate // max(1, sharing.get(link.id, 1))
        out[nic] = (out.get(nic) or 0) + share
    return {nic: rate for nic, rate in out.items() if nic not in missing}


# ---------------------------------------------------------------- running a probe


@dataclass(frozen=True)
class End:
    agent: AgentRef
    nic: str
    address: str


def _ref(agent: Agent) -> AgentRef:
    return AgentRef(agent.id, agent.name, agent.control_url, agent.credentials_generation)


def _end(session: Session, agent_id: str, nic: str, side: str) -> End:
    agent = session.get(Agent, agent_id)
    if agent is None:  # links refer to agents with RESTRICT: only a broken database
        raise InvalidRequestError((f"agent_{side}",), f"no agent {agent_id!r}")
    for n in agent.nics:
        if n.name == nic:
            return End(_ref(agent), nic, n.address)
    raise InvalidRequestError((f"nic_{side}",), f"agent {agent.name!r} no longer has NIC {nic!r}")


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _run_public(direction: str, streams: int, rate: int | None, run: Json) -> ProbeRunPublic:
    result = run["result"]
    cpu = (result.get("cpu_utilization_percent") or {}).get("host_total")
    return ProbeRunPublic(
        direction=direction,  # type: ignore[arg-type]  # one of SIDE's keys
        streams=streams,
        pacing_bps=rate,
        nic_paced=run.get("nic_paced"),
        bits_per_second=result["bits_per_second"],
        retransmits=result.get("retransmits"),
        stream_bits_per_second=[_mean(s) for s in result.get("stream_bits_per_second") or []],
        cpu_percent=cpu,
    )


class LinkProber:
    """The coordinator's running probes, one at most per link."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        client: IperfAgents,
        *,
        poll: float = 0.5,
    ) -> None:
        self.sessions = sessions
        self.client = client
        self.poll = poll
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def recover(self) -> None:
        """A probe that was running when the coordinator stopped failed."""
        with self.sessions() as session:
            for link in session.scalars(select(Link).where(Link.probe_state == "running")):
                self._finish(link, "interrupted: the coordinator stopped")
            session.commit()

    def start(self, session: Session, link: Link, body: ProbeCreate) -> None:
        """Marks ``link`` probing and starts the probe; 409 if one runs already."""
        task = self.tasks.get(link.id)
        if task is not None and not task.done():
            raise ConflictError(f"link {link.name!r} is being probed already")
        ends = {
            "a": _end(session, link.agent_a_id, link.nic_a, "a"),
            "b": _end(session, link.agent_b_id, link.nic_b, "b"),
        }
        link.probe_state, link.probe_error = "running", None
        link.probe_started_at, link.probe_finished_at = utcnow(), None
        session.commit()
        self.tasks[link.id] = asyncio.create_task(
            self._probe(link.id, link.capacity_bps, ends, body), name=f"probe-{link.id}"
        )

    async def _probe(
        self, link_id: str, capacity: int, ends: dict[str, End], body: ProbeCreate
    ) -> None:
        try:
            runs = await self.measure(capacity, ends, body)
            chosen = recommend(runs)
        except asyncio.CancelledError:
            self._save(link_id, error="interrupted: the coordinator stopped")
            raise
        except (AgentError, ProbeError) as exc:
            self._save(link_id, error=str(exc))
        except Exception as exc:  # a probe never takes the coordinator down
            log.exception("probe of link %s", link_id)
            self._save(link_id, error=f"{type(exc).__name__}: {exc}")
        else:
            self._save(link_id, runs=runs, chosen=chosen)

    def _finish(self, link: Link, error: str | None) -> None:
        link.probe_state = "failed" if error else "completed"
        link.probe_error = None if error is None else error[:4000]
        link.probe_finished_at = utcnow()

    def _save(
        self,
        link_id: str,
        *,
        error: str | None = None,
        runs: Sequence[ProbeRunPublic] = (),
        chosen: Recommendation | None = None,
    ) -> None:
        with self.sessions() as session:
            link = session.get(Link, link_id)
            if link is None:  # deleted meanwhile
                return
            self._finish(link, error)
            if chosen is not None:
                link.recommended_streams = chosen.streams
                link.recommended_pacing = dict(chosen.nic_pacing_bps)
                link.recommended_at = link.probe_finished_at
                link.probe_measurements = {"runs": [r.model_dump() for r in runs]}
            session.commit()

    async def measure(
        self, capacity: int, ends: dict[str, End], body: ProbeCreate
    ) -> list[ProbeRunPublic]:
        """Every run of the probe, one after another."""
        rates: list[int | None] = [None, *(round(f * capacity) for f in body.pacing)]
        runs = []
        for direction in body.directions:
            sender, receiver = (ends["a"], ends["b"])[:: 1 if direction == "a-to-b" else -1]
            for rate in rates:
                for streams in body.streams:
                    run = await self.run_once(sender, receiver, streams, rate, body)
                    runs.append(_run_public(direction, streams, rate, run))
        return runs

    async def run_once(
        self, sender: End, receiver: End, streams: int, rate: int | None, body: ProbeCreate
    ) -> Json:
        """One iperf3 test from ``sender`` to ``receiver``: the agent's finished run."""
        timeout = body.duration + RUN_SLACK
        server = await self.client.iperf(
            receiver.agent, "POST", "/servers", {"address": receiver.address, "timeout": timeout}
        )
        request: Json = {
            "host": receiver.address,
            "port": server["port"],
            "streams": streams,
            "duration": body.duration,
            "bind": sender.address,
            "congestion": body.congestion,
        }
        if rate is not None:
            request |= {"nic": sender.nic, "nic_pacing_bps": rate}
        try:
            run = await self.client.iperf(sender.agent, "POST", "/runs", request)
            run = await self._wait(sender.agent, run["id"], timeout)
        finally:
            with contextlib.suppress(AgentError):
                await self.client.iperf(receiver.agent, "DELETE", f"/servers/{server['id']}")
        if run["state"] != "completed":
            raise ProbeError(
                f"iperf3 from {sender.agent.name!r} to {receiver.agent.name!r} "
                f"({streams} streams): {run.get('error') or run['state']}"
            )
        return run

    async def _wait(self, agent: AgentRef, run_id: str, timeout: float) -> Json:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            run = await self.client.iperf(agent, "GET", f"/runs/{run_id}")
            if run["state"] != "running":
                return run
            if asyncio.get_running_loop().time() > deadline:
                raise ProbeError(f"iperf3 run {run_id} on {agent.name!r} did not end")
            await asyncio.sleep(self.poll)

    async def stop(self) -> None:
        """Cancels the running probes (their links show them failed)."""
        tasks = [t for t in self.tasks.values() if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.client.aclose()
