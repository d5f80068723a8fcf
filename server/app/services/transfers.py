"""Transfers: creation with their legs (``legs.py``), the state machine (``states.py``),
events, and the calls into the scheduler seam (``scheduler.py``).

A transfer never has one device on both sides, and its destination belongs to it
alone until it is final (``devices.py``); creations are serialized so two requests
cannot both take one destination.
"""

from __future__ import annotations

import hashlib
import json
import threading
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from reservoir.server.app import events
from reservoir.server.app.errors import (
    ConflictError,
    IdempotencyKeyReusedError,
    InvalidRequestError,
    NotFoundError,
)
from reservoir.server.app.models import (
    TransferCreate,
    TransferEventPublic,
    TransferPublic,
    TransferState,
)
from reservoir.server.app.services import devices, volume_sets
from reservoir.server.app.services.transfer_query import set_labels
from reservoir.server.app.tables import (
    AgentVolume,
    Link,
    Transfer,
    TransferEvent,
    TransferLeg,
    TransferPath,
    VolumeSet,
    utcnow,
)
from reservoir.server.domain.errors import LayoutError
from reservoir.server.domain.legs import check_supported, compute_legs
from reservoir.server.domain.probe import apply_recommendation
from reservoir.server.domain.scheduler import Scheduler
from reservoir.server.domain.states import Action, TransitionError, next_state

__all__ = ["act", "create", "event_public", "get", "list_events", "public"]

FINAL_LEG_STATES = {TransferState.COMPLETED.value, TransferState.CANCELLED.value}
_CREATING = threading.Lock()  # check that the destination is free, then store: one at a time


def public(transfer: Transfer) -> TransferPublic:
    legs = [
        {
            "index": leg.index,
            "source_agent": leg.source_volume.agent_id,
            "source_volume": leg.source_volume.name,
            "dest_agent": leg.dest_volume.agent_id,
            "dest_volume": leg.dest_volume.name,
            "bytes": leg.bytes,
            "streams": leg.streams,
            "paths": leg.link_ids,
            "state": leg.state,
            "copy_id": leg.copy_id,
            "copy_state": leg.copy_state,
            "done_bytes": leg.done_bytes,
            "last_error": leg.last_error,
            "summary": leg.summary,
        }
        for leg in transfer.legs
    ]
    return TransferPublic.model_validate(
        {
            "id": transfer.id,
            "source": transfer.source_set_id,
            "destination": transfer.dest_set_id,
            "streams_per_pair": transfer.streams_per_pair,
            "paths": [p.link_id for p in transfer.paths],
            "pacing": {"policy": transfer.pacing_policy, "margin": transfer.pacing_margin},
            "equalizer": transfer.equalizer,
            "verify": transfer.verify,
            "verification": transfer.verification,
            "multilink": transfer.multilink,
            "congestion": transfer.congestion,
            "state": transfer.state,
            "total_bytes": transfer.total_bytes,
            "done_bytes": transfer.done_bytes,
            "last_error": transfer.last_error,
            "legs": legs,
            "recommendation_applied": transfer.recommendation_applied,
            "created_at": transfer.created_at,
            "updated_at": transfer.updated_at,
            "idempotency_key": transfer.idempotency_key,
            "labels": transfer.labels,
            "started_at": transfer.started_at,
            "completed_at": transfer.completed_at,
            **pace(transfer),
        }
    )


RATE_AFTER_S = 1.0  # a rate taken over less time says little


def pace(transfer: Transfer, now: datetime | None = None) -> dict[str, float | None]:
    """``rate_bps``, the data rate since the transfer last began running (created or
    resumed: paused time does not count), and ``eta_seconds`` at that rate; None unless
    it is running and has moved data for a second at least."""
    since = transfer.running_since
    moved = (transfer.done_bytes or 0) - transfer.running_since_bytes
    if transfer.state != TransferState.RUNNING.value or since is None or moved <= 0:
        return {"rate_bps": None, "eta_seconds": None}
    elapsed = ((now or utcnow()) - since).total_seconds()
    if elapsed < RATE_AFTER_S:
        return {"rate_bps": None, "eta_seconds": None}
    rate = moved * 8 / elapsed
    left = max(transfer.total_bytes - (transfer.done_bytes or 0), 0)
    return {"rate_bps": rate, "eta_seconds": left * 8 / rate}


def event_public(event: TransferEvent) -> TransferEventPublic:
    return TransferEventPublic.model_validate(event, from_attributes=True)


def get(session: Session, transfer_id: str) -> Transfer:
    transfer = session.get(Transfer, transfer_id)
    if transfer is None:
        raise NotFoundError("transfer", transfer_id)
    return transfer


def list_events(session: Session, transfer_id: str) -> list[TransferEvent]:
    return list(get(session, transfer_id).events)


def _volume_set(session: Session, field: str, set_id: str) -> VolumeSet:
    vset = session.get(VolumeSet, set_id)
    if vset is None:
        raise InvalidRequestError((field,), f"no volume set {set_id!r}")
    return vset


def _links(session: Session, ids: list[str]) -> list[Link]:
    links = []
    for i, link_id in enumerate(ids):
        link = session.get(Link, link_id)
        if link is None:
            raise InvalidRequestError(("paths", i), f"no link {link_id!r}")
        links.append(link)
    return links


def _leg_paths(links: list[Link], source: AgentVolume, dest: AgentVolume) -> list[str]:
    """The given links that join the two agents of a leg (either way round)."""
    ends = {source.agent_id, dest.agent_id}
    return [link.id for link in links if {link.agent_a_id, link.agent_b_id} == ends]


def _legs(
    body: TransferCreate, src: VolumeSet, dst: VolumeSet, links: list[Link]
) -> list[TransferLeg]:
    devices.check_transfer(src, dst)
    have, need = volume_sets.layout(dst).capacity, volume_sets.layout(src).capacity
    if have < need:
        raise InvalidRequestError(
            ("destination",),
            f"the destination holds {have} bytes, the source needs {need}",
        )
    try:
        check_supported(volume_sets.layout(src), volume_sets.layout(dst))
        plan = compute_legs(volume_sets.layout(src), volume_sets.layout(dst))
    except LayoutError as exc:
        raise InvalidRequestError(("destination",), str(exc)) from None
    legs = []
    for index, leg in enumerate(plan):
        source, dest = src.members[leg.source].volume, dst.members[leg.dest].volume
        paths = _leg_paths(links, source, dest)
        if links and not paths and source.agent_id != dest.agent_id:
            raise InvalidRequestError(
                ("paths",),
                f"no given link joins agent {source.agent.name!r} and agent {dest.agent.name!r}",
            )
        legs.append(
            TransferLeg(
                index=index,
                source_volume=source,
                dest_volume=dest,
                bytes=leg.bytes,
                streams=body.streams_per_pair,
                link_ids=paths,
                state=TransferState.QUEUED.value,
            )
        )
    return legs


def create(
    session: Session, body: TransferCreate, scheduler: Scheduler, key: str | None = None
) -> tuple[Transfer, bool]:
    """The transfer ``body`` asks for, and whether it was made now: a request with the
    ``key`` (Idempotency-Key) of an earlier one gets that transfer back, made or not,
    if it asks the same; 409 if it asks something else."""
    digest = _request_digest(body) if key is not None else None
    with _CREATING:
        if key is not None:
            first = session.scalars(select(Transfer).where(Transfer.idempotency_key == key)).first()
            if first is not None:
                if first.request_digest != digest:
                    raise IdempotencyKeyReusedError(
                        f"Idempotency-Key {key!r} was used for another request (transfer "
                        f"{first.id}): a key names one request"
                    )
                return first, False
        return _create(session, body, scheduler, key, digest), True


def _request_digest(body: TransferCreate) -> str:
    """SHA-256 of the request as the coordinator read it (defaults filled in)."""
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _create(
    session: Session,
    body: TransferCreate,
    scheduler: Scheduler,
    key: str | None = None,
    digest: str | None = None,
) -> Transfer:
    src = _volume_set(session, "source", body.source)
    dst = _volume_set(session, "destination", body.destination)
    links = _links(session, body.paths)
    applied = apply_recommendation(body, links)
    if applied is not None and applied["streams_per_pair"] is not None:
        body = body.model_copy(update={"streams_per_pair": applied["streams_per_pair"]})
    legs = _legs(body, src, dst, links)
    devices.check_free(session, dst)
    now = utcnow()
    transfer = Transfer(
        source_set_id=src.id,
        dest_set_id=dst.id,
        streams_per_pair=body.streams_per_pair,
        pacing_policy=body.pacing.policy.value,
        pacing_margin=body.pacing.margin,
        equalizer=body.equalizer,
        verify=body.verify,
        verification=body.verification,
        multilink=body.multilink,
        congestion=body.congestion,
        state=TransferState.QUEUED.value,
        total_bytes=sum(leg.bytes for leg in legs),
        created_at=now,
        updated_at=now,
        paths=[TransferPath(position=i, link_id=link.id) for i, link in enumerate(links)],
        legs=legs,
        recommendation_applied=applied,
        idempotency_key=key,
        request_digest=digest,
    )
    set_labels(transfer, body.labels)
    session.add(transfer)
    session.flush()
    scheduler.check(session, transfer)
    detail = (
        f"created: {len(legs)} legs, {transfer.total_bytes} bytes from {src.name!r} to {dst.name!r}"
    )
    events.record(session, transfer, "state", detail, to_state=transfer.state)
    scheduler.created(session, transfer)
    session.commit()
    return transfer


def act(session: Session, transfer_id: str, action: Action, scheduler: Scheduler) -> Transfer:
    """Applies a user's ``action`` (pause, resume, cancel); 409 if the state refuses it."""
    transfer = get(session, transfer_id)
    before = TransferState(transfer.state)
    try:
        after = next_state(before, action)
    except TransitionError as exc:
        raise ConflictError(f"transfer {transfer_id!r}: {exc}") from None
    transfer.state = after.value
    transfer.updated_at = utcnow()
    for leg in transfer.legs:
        if leg.state not in FINAL_LEG_STATES:
            leg.state = after.value
    events.record(
        session, transfer, "state", f"{action.value} by a user", from_state=before, to_state=after
    )
    hook = {
        Action.PAUSE: scheduler.paused,
        Action.RESUME: scheduler.resumed,
        Action.CANCEL: scheduler.cancelled,
    }[action]
    hook(session, transfer)
    session.commit()
    session.refresh(transfer)
    return transfer
