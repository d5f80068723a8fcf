"""``/copies``: start, list, pause, resume and cancel copies; their telemetry and caps."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response, status

from reservoir.agent.control.api.deps import Authorized, ManagerDep
from reservoir.agent.control.copies import CopyJob
from reservoir.agent.control.info import congestion_control
from reservoir.agent.control.models import (
    CapsBase,
    CapsCreate,
    CapsPublic,
    CopyCreate,
    CopyPublic,
    CopyState,
)
from reservoir.agent.control.nic_pacing import NicPacer
from reservoir.agent.telemetry import Record

__all__ = ["NOT_RUNNING", "caps_public", "copy_public", "router"]

router = APIRouter(prefix="/copies", tags=["copies"], dependencies=[Authorized])

NOT_RUNNING = "stored: applied to the streams when the copy runs"
CopyId = Annotated[str, "copy id"]


def caps_public(job: CopyJob, pacer: NicPacer | None = None) -> CapsPublic:
    """What was asked, and whether (and how) it is applied to the running streams
    and NICs."""
    assert job.caps is not None
    live = job.stream_caps
    if live is None:
        return CapsPublic(requested=job.caps, applied=False, reason=NOT_RUNNING)
    reason = f"cwnd caps with {live.mechanism}; pacing rates with SO_MAX_PACING_RATE"
    applied = not live.errors
    nics = job.caps.nic_pacing_rates
    if nics and pacer is None:
        reason += "; NIC pacing: not available on this agent"
        applied = False
    elif nics and pacer is not None:
        reason += f"; NIC pacing: {pacer.describe(nics)}"
        applied = applied and not set(nics) & set(pacer.errors)
    if live.errors:
        reason += "; not applied on " + ", ".join(
            f"stream {s}: {why}" for s, why in sorted(live.errors.items())
        )
    return CapsPublic(requested=job.caps, applied=applied, reason=reason)


def copy_public(job: CopyJob, pacer: NicPacer | None = None) -> CopyPublic:
    base = job.request.model_dump(exclude={"chap", "id", "caps"})
    return CopyPublic(
        **base,
        id=job.id,
        state=job.state,
        created=job.created,
        updated=job.updated,
        chap_user=None if job.request.chap is None else job.request.chap.user,
        progress=job.progress,
        last_error=job.last_error,
        retryable=job.retryable,
        summary=job.summary,
        caps=None if job.caps is None else caps_public(job, pacer),
        checkpoint=str(job.checkpoint),
        runs=job.runs,
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {"description": "a copy with this id and the same request exists (a retry)"},
        403: {"description": "a local source or destination is not one of the agent's volumes"},
        409: {"description": "a copy with this id exists with another request"},
    },
)
async def create_copy(body: CopyCreate, manager: ManagerDep, response: Response) -> CopyPublic:
    if body.congestion is not None:
        _, available = congestion_control()
        if body.congestion not in available:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"congestion control {body.congestion!r} is not available on this host"
                f" ({' '.join(available) or 'none listed'})",
            )
    job = manager.existing(body)
    if job is not None:
        response.status_code = status.HTTP_200_OK
        return copy_public(job, manager.pacer)
    return copy_public(manager.create(body), manager.pacer)


@router.get("")
async def list_copies(manager: ManagerDep) -> list[CopyPublic]:
    return [copy_public(job, manager.pacer) for job in manager.all()]


WAIT_MAX_S = 60.0


@router.get("/{copy_id}")
async def get_copy(
    copy_id: CopyId,
    manager: ManagerDep,
    wait: Annotated[
        float,
        Query(
            ge=0,
            le=WAIT_MAX_S,
            description="with `while_state`: answer once the copy is no longer in that "
            "state, or after this many seconds, whichever comes first (0: at once)",
        ),
    ] = 0.0,
    while_state: Annotated[
        CopyState | None, Query(description="the state `wait` waits for the copy to leave")
    ] = None,
) -> CopyPublic:
    """The copy; with ``wait`` and ``while_state``, as soon as its state changes (how
    a coordinator learns at once that a copy ended, without polling for it)."""
    if while_state is None or wait == 0:
        return copy_public(manager.get(copy_id), manager.pacer)
    return copy_public(await manager.wait(copy_id, while_state, wait), manager.pacer)


@router.post("/{copy_id}/pause")
async def pause_copy(copy_id: CopyId, manager: ManagerDep) -> CopyPublic:
    return copy_public(await manager.pause(copy_id), manager.pacer)


@router.post(
    "/{copy_id}/resume",
    responses={403: {"description": "the copy names a path that is no longer a volume"}},
)
async def resume_copy(copy_id: CopyId, manager: ManagerDep) -> CopyPublic:
    return copy_public(manager.resume(copy_id), manager.pacer)


@router.post("/{copy_id}/cancel")
async def cancel_copy(copy_id: CopyId, manager: ManagerDep) -> CopyPublic:
    return copy_public(await manager.cancel(copy_id), manager.pacer)


@router.get("/{copy_id}/telemetry", response_model=list[Record])
async def copy_telemetry(
    copy_id: CopyId, manager: ManagerDep, limit: Annotated[int, Query(ge=1, le=10_000)] = 100
) -> Response:
    """The newest ``limit`` records, oldest first (the file's own JSON lines: served
    twice a second per running copy, they are not decoded and encoded again)."""
    return Response(manager.telemetry_json(copy_id, limit), media_type="application/json")


@router.put("/{copy_id}/caps")
async def set_caps(copy_id: CopyId, body: CapsCreate, manager: ManagerDep) -> CapsPublic:
    job = manager.set_caps(copy_id, CapsBase.model_validate(body.model_dump()))
    return caps_public(job, manager.pacer)
