"""``/volume-sets``: ordered lists of agents' volumes with a stripe unit."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response, status
from sqlalchemy import select

from reservoir.server.app.api.deps import (
    AUTH_RESPONSES,
    NOT_FOUND,
    PAGED,
    PageQuery,
    SessionDep,
    UserAuth,
)
from reservoir.server.app.models import VolumeSetCreate, VolumeSetPublic
from reservoir.server.app.services import pages, volume_sets
from reservoir.server.app.tables import VolumeSet

__all__ = ["router"]

router = APIRouter(
    prefix="/volume-sets", tags=["volume sets"], responses=AUTH_RESPONSES, dependencies=[UserAuth]
)

SetId = Annotated[str, Path(description="volume set id", max_length=36)]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    summary="Create a volume set from registered agents' volumes",
    responses={409: {"description": "a volume set of that name exists"}},
)
def create_volume_set(body: VolumeSetCreate, session: SessionDep) -> VolumeSetPublic:
    return volume_sets.public(volume_sets.create(session, body))


@router.get("", summary="List the volume sets", responses=PAGED)
def list_volume_sets(
    session: SessionDep, request: Request, response: Response, query: PageQuery
) -> list[VolumeSetPublic]:
    found = pages.page(
        session, select(VolumeSet), VolumeSet.created_at, VolumeSet.id,
        limit=query.limit, cursor=query.cursor,
    )  # fmt: skip
    pages.link_next(request, response, found.next_cursor)
    return [volume_sets.public(v) for v in found.items]


@router.get("/{set_id}", responses=NOT_FOUND, summary="One volume set")
def get_volume_set(set_id: SetId, session: SessionDep) -> VolumeSetPublic:
    return volume_sets.public(volume_sets.get(session, set_id))


@router.delete(
    "/{set_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Remove a volume set no transfer uses",
    responses=NOT_FOUND | {409: {"description": "used by a transfer"}},
)
def delete_volume_set(set_id: SetId, session: SessionDep) -> None:
    volume_sets.delete(session, set_id)
