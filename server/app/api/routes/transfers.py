"""``/transfers``: create (legs computed), inspect, pause, resume, cancel; events."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Response, status

from reservoir.server.app.api.deps import (
    AUTH_RESPONSES,
    NOT_FOUND,
    SchedulerDep,
    SessionDep,
    UserAuth,
)
from reservoir.server.app.models import TransferCreate, TransferEventPublic, TransferPublic
from reservoir.server.app.services import transfers
from reservoir.server.domain.states import Action

__all__ = ["router"]

router = APIRouter(
    prefix="/transfers", tags=["transfers"], responses=AUTH_RESPONSES, dependencies=[UserAuth]
)

TransferId = Annotated[str, Path(description="transfer id", max_length=36)]
REFUSED: dict[int | str, dict[str, Any]] = {
    409: {"description": "the transfer's state does not allow it"}
}


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        pattern=r"^[\x21-\x7e]+$",
        description="any printable ASCII without spaces, e.g. a UUID: the same key again "
        "returns the transfer the first request made (200), if it asks the same; 409 if not",
    ),
]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    summary="Queue a transfer from one volume set to another; its legs are computed",
    responses={
        200: {"description": "an earlier request with this Idempotency-Key made it"},
        409: {"description": "the destination is held, or the key named another request"},
    },
)
def create_transfer(
    body: TransferCreate,
    session: SessionDep,
    scheduler: SchedulerDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> TransferPublic:
    transfer, made = transfers.create(session, body, scheduler, idempotency_key)
    if not made:
        response.status_code = status.HTTP_200_OK
    return transfers.public(transfer)


@router.get("", summary="List the transfers")
def list_transfers(session: SessionDep) -> list[TransferPublic]:
    return [transfers.public(t) for t in transfers.list_all(session)]


@router.get("/{transfer_id}", responses=NOT_FOUND, summary="One transfer with its legs")
def get_transfer(transfer_id: TransferId, session: SessionDep) -> TransferPublic:
    return transfers.public(transfers.get(session, transfer_id))


@router.post(
    "/{transfer_id}/pause", summary="Pause a queued or running transfer", responses=REFUSED
)
def pause_transfer(
    transfer_id: TransferId, session: SessionDep, scheduler: SchedulerDep
) -> TransferPublic:
    return transfers.public(transfers.act(session, transfer_id, Action.PAUSE, scheduler))


@router.post(
    "/{transfer_id}/resume", summary="Queue a paused or failed transfer again", responses=REFUSED
)
def resume_transfer(
    transfer_id: TransferId, session: SessionDep, scheduler: SchedulerDep
) -> TransferPublic:
    return transfers.public(transfers.act(session, transfer_id, Action.RESUME, scheduler))


@router.post("/{transfer_id}/cancel", summary="Cancel a transfer for good", responses=REFUSED)
def cancel_transfer(
    transfer_id: TransferId, session: SessionDep, scheduler: SchedulerDep
) -> TransferPublic:
    return transfers.public(transfers.act(session, transfer_id, Action.CANCEL, scheduler))


@router.get(
    "/{transfer_id}/events", responses=NOT_FOUND, summary="The transfer's history, oldest first"
)
def transfer_events(transfer_id: TransferId, session: SessionDep) -> list[TransferEventPublic]:
    return [transfers.event_public(e) for e in transfers.list_events(session, transfer_id)]
