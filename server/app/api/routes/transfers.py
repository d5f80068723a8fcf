"""``/transfers``: create (legs computed), list (pages, filters), inspect, label, pause,
resume, cancel; events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Path, Query, Request, Response, status
from pydantic import Field

from reservoir.server.app.api.deps import (
    AUTH_RESPONSES,
    NOT_FOUND,
    LabelledPageParams,
    SchedulerDep,
    SessionDep,
    UserAuth,
)
from reservoir.server.app.models import (
    MAX_LABELS,
    TransferCreate,
    TransferEventPublic,
    TransferPatch,
    TransferPublic,
    TransferState,
)
from reservoir.server.app.services import pages, transfer_query, transfers
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


class TransferListQuery(LabelledPageParams):
    """The query of ``GET /transfers``; an unknown parameter is refused (422)."""

    state: list[TransferState] = Field(
        default_factory=list, description="any of these states (repeatable)"
    )
    agent: str | None = Field(
        default=None, max_length=128, description="an agent (id or name) of either volume set"
    )
    created_after: datetime | None = Field(default=None, description="at or after (ISO 8601)")
    created_before: datetime | None = Field(default=None, description="before (ISO 8601)")
    order: Literal["asc", "desc"] = Field(
        default="asc", description="asc: oldest first; desc: newest first"
    )


ListQuery = Annotated[TransferListQuery, Query()]


@router.get(
    "",
    summary="List transfers a page at a time, oldest or newest first; by state, label, agent, time",
    responses={
        200: {
            "description": 'a page; a later one\'s URL is in `Link: <...>; rel="next"` and '
            "its cursor in `X-Next-Cursor`, absent on the last page",
        }
    },
)
def list_transfers(
    session: SessionDep, request: Request, response: Response, query: ListQuery
) -> list[TransferPublic]:
    want = transfer_query.TransferFilter(
        states=[s.value for s in query.state],
        labels=query.label,
        agent=query.agent,
        created_after=_aware(query.created_after),
        created_before=_aware(query.created_before),
        limit=query.limit,
        cursor=query.cursor,
        order=query.order,
    )
    found = transfer_query.page(session, want)
    pages.link_next(request, response, found.next_cursor)
    return [transfers.public(t) for t in found.items]


def _aware(when: datetime | None) -> datetime | None:
    """A time without a zone is UTC."""
    return when.replace(tzinfo=UTC) if when is not None and when.tzinfo is None else when


@router.patch(
    "/{transfer_id}",
    responses=NOT_FOUND,
    summary="Change a transfer's labels (JSON merge patch: null removes a label)",
)
def update_transfer(
    transfer_id: TransferId, body: TransferPatch, session: SessionDep
) -> TransferPublic:
    transfer = transfers.get(session, transfer_id)
    transfer_query.patch_labels(transfer, body.labels, MAX_LABELS)
    session.commit()
    return transfers.public(transfer)


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
