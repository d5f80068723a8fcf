"""Volume sets: an ordered list of agents' volumes striped with one stripe unit; never
one device twice (``devices.py``)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from reservoir.server.app.errors import ConflictError, InvalidRequestError, NotFoundError
from reservoir.server.app.models import VolumeSetCreate, VolumeSetPublic
from reservoir.server.app.services import devices
from reservoir.server.app.tables import (
    Agent,
    AgentVolume,
    Transfer,
    VolumeSet,
    VolumeSetMember,
    utcnow,
)
from reservoir.server.domain.legs import StripeLayout

__all__ = ["create", "delete", "get", "layout", "public"]


def layout(vset: VolumeSet) -> StripeLayout:
    return StripeLayout([m.volume.size_bytes for m in vset.members], vset.stripe_unit)


def public(vset: VolumeSet) -> VolumeSetPublic:
    members = [
        {
            "agent_id": m.volume.agent_id,
            "agent_name": m.volume.agent.name,
            "volume": m.volume.name,
            "size_bytes": m.volume.size_bytes,
        }
        for m in vset.members
    ]
    return VolumeSetPublic.model_validate(
        {
            "id": vset.id,
            "name": vset.name,
            "members": members,
            "stripe_unit": vset.stripe_unit,
            "capacity_bytes": layout(vset).capacity,
            "created_at": vset.created_at,
        }
    )


def get(session: Session, set_id: str) -> VolumeSet:
    vset = session.get(VolumeSet, set_id)
    if vset is None:
        raise NotFoundError("volume set", set_id)
    return vset


def _volume(session: Session, index: int, agent_id: str, name: str) -> AgentVolume:
    agent = session.get(Agent, agent_id)
    if agent is None:
        raise InvalidRequestError(("members", index, "agent_id"), f"no agent {agent_id!r}")
    for volume in agent.volumes:
        if volume.name == name:
            return volume
    raise InvalidRequestError(
        ("members", index, "volume"), f"agent {agent.name!r} has no volume {name!r}"
    )


def create(session: Session, body: VolumeSetCreate) -> VolumeSet:
    if session.scalar(select(VolumeSet.id).where(VolumeSet.name == body.name)) is not None:
        raise ConflictError(f"a volume set named {body.name!r} exists already")
    volumes = [_volume(session, i, m.agent_id, m.volume) for i, m in enumerate(body.members)]
    devices.check_distinct(volumes)
    smallest = min(v.size_bytes for v in volumes)
    if smallest < body.stripe_unit:
        raise InvalidRequestError(
            ("stripe_unit",), f"larger than the smallest member ({smallest} bytes)"
        )
    vset = VolumeSet(
        name=body.name,
        stripe_unit=body.stripe_unit,
        created_at=utcnow(),
        members=[VolumeSetMember(position=i, volume=v) for i, v in enumerate(volumes)],
    )
    session.add(vset)
    session.commit()
    return vset


def delete(session: Session, set_id: str) -> None:
    vset = get(session, set_id)
    used = session.scalars(
        select(Transfer.id).where(
            (Transfer.source_set_id == set_id) | (Transfer.dest_set_id == set_id)
        )
    ).all()
    if used:
        raise ConflictError(f"volume set {set_id!r} is used by transfer(s) {', '.join(used)}")
    session.delete(vset)
    session.commit()
