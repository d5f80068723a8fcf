"""Links: a path between a NIC of one agent and a NIC of another, declared or measured."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from reservoir.server.app.errors import ConflictError, InvalidRequestError, NotFoundError
from reservoir.server.app.models import (
    LinkCreate,
    LinkProbePublic,
    LinkPublic,
    LinkRecommendationPublic,
    ProbeCreate,
)
from reservoir.server.app.tables import Agent, Link, TransferPath, utcnow
from reservoir.server.domain.probe import LinkProber

__all__ = ["create", "delete", "get", "probe", "public"]


def public(link: Link) -> LinkPublic:
    return LinkPublic(
        id=link.id,
        name=link.name,
        agent_a=link.agent_a_id,
        nic_a=link.nic_a,
        agent_b=link.agent_b_id,
        nic_b=link.nic_b,
        capacity_bps=link.capacity_bps,
        rtt_ms=link.rtt_ms,
        source=link.source,  # type: ignore[arg-type]  # validated to a LinkSource
        bottleneck=link.bottleneck,
        created_at=link.created_at,
        probe=_probe_public(link),
        recommendation=_recommendation_public(link),
    )


def _probe_public(link: Link) -> LinkProbePublic | None:
    if link.probe_state is None:
        return None
    return LinkProbePublic(
        state=link.probe_state,  # type: ignore[arg-type]  # written by probe.py only
        started_at=link.probe_started_at,
        finished_at=link.probe_finished_at,
        error=link.probe_error,
    )


def _recommendation_public(link: Link) -> LinkRecommendationPublic | None:
    if link.recommended_streams is None or link.recommended_at is None:
        return None
    return LinkRecommendationPublic.model_validate(
        {
            "streams": link.recommended_streams,
            "nic_pacing_bps": link.recommended_pacing or {},
            "measured_at": link.recommended_at,
            "measurements": (link.probe_measurements or {}).get("runs", []),
        }
    )


def probe(session: Session, link_id: str, body: ProbeCreate, prober: LinkProber) -> Link:
    """Starts probing the link (``probe.py``); 409 while a probe of it runs."""
    link = get(session, link_id)
    prober.start(session, link, body)
    return link


def get(session: Session, link_id: str) -> Link:
    link = session.get(Link, link_id)
    if link is None:
        raise NotFoundError("link", link_id)
    return link


def _end(session: Session, side: str, agent_id: str, nic: str) -> None:
    agent = session.get(Agent, agent_id)
    if agent is None:
        raise InvalidRequestError((f"agent_{side}",), f"no agent {agent_id!r}")
    if nic not in {n.name for n in agent.nics}:
        raise InvalidRequestError((f"nic_{side}",), f"agent {agent.name!r} has no NIC {nic!r}")


def create(session: Session, body: LinkCreate) -> Link:
    if session.scalar(select(Link.id).where(Link.name == body.name)) is not None:
        raise ConflictError(f"a link named {body.name!r} exists already")
    _end(session, "a", body.agent_a, body.nic_a)
    _end(session, "b", body.agent_b, body.nic_b)
    link = Link(
        name=body.name,
        agent_a_id=body.agent_a,
        nic_a=body.nic_a,
        agent_b_id=body.agent_b,
        nic_b=body.nic_b,
        capacity_bps=body.capacity_bps,
        rtt_ms=body.rtt_ms,
        source=body.source.value,
        bottleneck=body.bottleneck,
        created_at=utcnow(),
    )
    session.add(link)
    session.commit()
    return link


def delete(session: Session, link_id: str) -> None:
    link = get(session, link_id)
    used = session.scalars(
        select(TransferPath.transfer_id).where(TransferPath.link_id == link_id).distinct()
    ).all()
    if used:
        raise ConflictError(f"link {link_id!r} is a path of transfer(s) {', '.join(used)}")
    session.delete(link)
    session.commit()
