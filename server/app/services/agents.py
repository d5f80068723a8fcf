"""Agents: registration (with NICs, volumes, capabilities), heartbeats, removal.

An agent is registered with the volumes it has, and only those: before anything is
stored, :func:`confirm_volumes` asks the agent (``GET /volumes``, with the control
token the coordinator derives for its name) and accepts a declared volume only if the
agent reports it: a ``path`` volume by the same path, a LUN by its ``iqn`` and
``lun``, usable, and at least as large as declared. The device id the agent reports
is stored with the volume; sets and transfers compare volumes by it (``devices.py``).
An agent that cannot be asked, or refuses the token, is not registered (422, with the
reason).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from reservoir.server.app.agent_client import AgentError, AgentRef, AgentRefusedError, VolumeLister
from reservoir.server.app.errors import ConflictError, InvalidRequestError, NotFoundError
from reservoir.server.app.models import (
    MAX_LABELS,
    AgentCreate,
    AgentPatch,
    AgentPublic,
    HeartbeatCreate,
    VolumeBase,
)
from reservoir.server.app.services import labels
from reservoir.server.app.tables import (
    Agent,
    AgentLabel,
    AgentNic,
    AgentVolume,
    Link,
    VolumeSet,
    VolumeSetMember,
    utcnow,
)

__all__ = [
    "UNREACHABLE",
    "confirm_volumes",
    "create",
    "delete",
    "get",
    "heartbeat",
    "heartbeat_of",
    "public",
    "status",
    "unconfirmed",
    "update",
]

DEVICE_ID = re.compile(r"^naa\.[0-9a-f]{32}$")
Json = dict[str, object]


UNREACHABLE = "unreachable"


def status(agent: Agent, unreachable_after: float, now: datetime | None = None) -> str:
    """What the agent last said of itself (``registered`` until its first heartbeat),
    or ``unreachable`` once its last heartbeat is older than ``unreachable_after`` s."""
    last = agent.last_heartbeat_at
    if last is not None and ((now or utcnow()) - last).total_seconds() > unreachable_after:
        return UNREACHABLE
    return agent.status


def public(agent: Agent, unreachable_after: float = float("inf")) -> AgentPublic:
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
                    "device_id": v.device_id,
                }
                for v in agent.volumes
            ],
            "capabilities": agent.capabilities,
            "labels": agent.labels,
            "token_generation": agent.credentials_generation,
            "status": status(agent, unreachable_after),
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


def _what(volume: VolumeBase) -> str:
    return volume.path if volume.path is not None else f"{volume.iqn} lun {volume.lun}"


def _is(volume: VolumeBase, entry: Json) -> bool:
    """Whether the agent's ``entry`` is ``volume``: the same path, or the same LUN."""
    if volume.path is not None:
        return entry.get("path") == volume.path
    lun = (entry.get("kind"), entry.get("iqn"), entry.get("lun"))
    return lun == ("lun", volume.iqn, volume.lun)


def _reported(volume: VolumeBase, reported: list[Json]) -> Json | None:
    return next((entry for entry in reported if _is(volume, entry)), None)


def _device_id(index: int, volume: VolumeBase, agent: str, reported: list[Json]) -> str:
    """The device id the agent reports for ``volume``; 422 at ``volumes.index`` if it
    does not report it, cannot use it, or it is smaller than declared."""
    where = ("volumes", index)
    what = f"volume {volume.name!r} ({_what(volume)})"
    entry = _reported(volume, reported)
    if entry is None:
        raise InvalidRequestError(
            where,
            f"agent {agent!r} does not report {what} among its volumes (the LUNs of its "
            "target and its source_volumes)",
        )
    if entry.get("error"):
        raise InvalidRequestError(where, f"agent {agent!r} cannot use {what}: {entry['error']}")
    device, size = entry.get("device_id"), entry.get("size_bytes")
    if not isinstance(device, str) or not DEVICE_ID.match(device) or not isinstance(size, int):
        raise InvalidRequestError(where, f"agent {agent!r} reports no device id or size for {what}")
    if volume.size_bytes > size:
        raise InvalidRequestError(
            where, f"{what} is declared with {volume.size_bytes} bytes; agent {agent!r} has {size}"
        )
    return device


def unconfirmed(body: AgentCreate, exc: AgentError) -> InvalidRequestError:
    """Why the agent could not be asked (its reason, never the token)."""
    head = f"could not confirm the volumes of agent {body.name!r} at {body.control_url}"
    if isinstance(exc, AgentRefusedError) and exc.status in (401, 403):
        return InvalidRequestError(
            ("name",),
            f"{head}: it refused the coordinator's token for {body.name!r} "
            f"({exc.status}: {exc.answer}); configure the agent with what "
            f"`reservoir server agent-credentials {body.name}` prints",
        )
    reason = str(exc).removeprefix(f"agent {body.name!r}: ")
    return InvalidRequestError(("control_url",), f"{head}: {reason}")


async def confirm_volumes(lister: VolumeLister, body: AgentCreate) -> list[str]:
    """The device id of each volume of ``body`` as the agent reports it (nothing is
    asked of an agent registered without volumes); :class:`InvalidRequestError`
    naming the first volume it does not confirm, or why it could not be asked."""
    if not body.volumes:
        return []
    ref = AgentRef("", body.name, str(body.control_url))
    try:
        reported = await lister.volumes(ref)
    except AgentError as exc:
        raise unconfirmed(body, exc) from None
    return [_device_id(i, v, body.name, reported) for i, v in enumerate(body.volumes)]


def create(session: Session, body: AgentCreate, device_ids: Sequence[str] = ()) -> Agent:
    """Stores the agent; ``device_ids``: one per volume, from :func:`confirm_volumes`."""
    if session.scalar(select(Agent.id).where(Agent.name == body.name)) is not None:
        raise ConflictError(f"an agent named {body.name!r} is registered already")
    if len(device_ids) != len(body.volumes):
        raise ValueError("every volume needs the device id its agent reported")
    agent = Agent(
        name=body.name,
        control_url=str(body.control_url),
        capabilities=list(body.capabilities),
        registered_at=utcnow(),
        status="registered",
        nics=[AgentNic(**nic.model_dump()) for nic in body.nics],
        volumes=[
            AgentVolume(**vol.model_dump(), device_id=device)
            for vol, device in zip(body.volumes, device_ids, strict=True)
        ],
    )
    labels.sync(agent.label_rows, body.labels, _label)
    session.add(agent)
    session.commit()
    return agent


def _label(key: str, value: str) -> AgentLabel:
    return AgentLabel(key=key, value=value)


def update(session: Session, agent_id: str, body: AgentPatch) -> Agent:
    """Applies what ``body`` gives: the control URL, NICs' addresses and line rates (by
    name: 422 for one the agent does not have), the capabilities, labels (merged), a
    token rotation."""
    agent = get(session, agent_id)
    if body.control_url is not None:
        agent.control_url = str(body.control_url)
    nics = {nic.name: nic for nic in agent.nics}
    for index, change in enumerate(body.nics):
        nic = nics.get(change.name)
        if nic is None:
            raise InvalidRequestError(
                ("nics", index, "name"), f"agent {agent.name!r} has no NIC {change.name!r}"
            )
        if change.address is not None:
            nic.address = change.address
        if change.speed_bps is not None:
            nic.speed_bps = change.speed_bps
    if body.capabilities is not None:
        agent.capabilities = list(body.capabilities)
    if body.labels:
        merged = labels.patched(agent.labels, body.labels, MAX_LABELS, "an agent")
        labels.sync(agent.label_rows, merged, _label)
    if body.rotate_tokens:
        agent.credentials_generation += 1
    session.commit()
    return agent


def heartbeat(session: Session, agent_id: str, body: HeartbeatCreate) -> Agent:
    return _beat(session, get(session, agent_id), body)


def heartbeat_of(session: Session, name: str, body: HeartbeatCreate) -> Agent:
    """The heartbeat of the agent named ``name`` (whose token the request carried)."""
    agent = session.scalars(select(Agent).where(Agent.name == name)).one_or_none()
    if agent is None:
        raise NotFoundError("agent", name)
    return _beat(session, agent, body)


def _beat(session: Session, agent: Agent, body: HeartbeatCreate) -> Agent:
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
