"""Agents: registration (with NICs, volumes, capabilities), heartbeats, removal."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from reservoir.server.errors import ConflictError, NotFoundError
from reservoir.server.models import AgentCreate, AgentPublic, HeartbeatCreate
from reservoir.server.tables import (
    Agent,
    AgentNic,
    AgentVolume,
    Link,
    VolumeSet,
    VolumeSetMember,
    utcnow,
)

__all__ = ["create", "delete", "get", "heartbeat", "list_all", "public"]


def public(agent: Agent) -> AgentPublic:
    return AgentPublic.model_validate(
        {
            "id": agent.id,
            "name": agent.name,
            "control_url": agent.control_url,
            "nics": [
                {"name": n.name, "address": n.address, "speed_bps": n.speed_bps} for n in agent.nics
            ],
            "volumes": [
                {
                    "name": v.name,
                    "path": v.path,
                    "iqn": v.iqn,
                    "lun": v.lun,
                    "size_bytes": v.size_bytes,
                    "block_size": v.block_size,
                    "portal": v.portal,
                }
                for v in agent.volumes
            ],
            "capabilities": agent.capabilities,
            "status": agent.status,
            "version": agent.version,
            "registered_at": agent.registered_at,
            "last_heartbeat_at": agent.last_heartbeat_at,
        }
    )


def get(session: Session, agent_id: str) -> Agent:
    agent = session.get(Agent, agent_id)
    if agent is None:
        raise NotFoundError("agent", agent_id)
    return agent


def list_all(session: Session) -> Sequence[Agent]:
    return session.scalars(select(Agent).order_by(Agent.registered_at, Agent.id)).all()


def create(session: Session, body: AgentCreate) -> Agent:
    if session.scalar(select(Agent.id).where(Agent.name == body.name)) is not None:
        raise ConflictError(f"an agent named {body.name!r} is registered already")
    agent = Agent(
        name=body.name,
        control_url=str(body.control_url),
        capabilities=list(body.capabilities),
        registered_at=utcnow(),
        status="registered",
        nics=[AgentNic(**nic.model_dump()) for nic in body.nics],
        volumes=[AgentVolume(**vol.model_dump()) for vol in body.volumes],
    )
    session.add(agent)
    session.commit()
    return agent


def heartbeat(session: Session, agent_id: str, body: HeartbeatCreate) -> Agent:
    agent = get(session, agent_id)
    agent.last_heartbeat_at = utcnow()
    agent.status = body.status
    agent.version = body.version
    session.commit()
    return agent


def _users(session: Session, agent: Agent) -> list[str]:
    """What still refers to ``agent``: volume sets and links, by name."""
    sets = session.scalars(
        select(VolumeSet.name)
        .join(VolumeSetMember, VolumeSetMember.volume_set_id == VolumeSet.id)
        .join(AgentVolume, AgentVolume.id == VolumeSetMember.volume_id)
        .where(AgentVolume.agent_id == agent.id)
        .distinct()
    ).all()
    links = session.scalars(
        select(Link.name).where((Link.agent_a_id == agent.id) | (Link.agent_b_id == agent.id))
    ).all()
    return [f"volume set {n!r}" for n in sets] + [f"link {n!r}" for n in links]


def delete(session: Session, agent_id: str) -> None:
    agent = get(session, agent_id)
    users = _users(session, agent)
    if users:
        raise ConflictError(f"agent {agent_id!r} is still used by {', '.join(users)}")
    session.delete(agent)
    session.commit()
