"""``/volume-sets``: ordered lists of agents' volumes with a stripe unit."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status

from reservoir.server.app.api.deps import AUTH_RESPONSES, NOT_FOUND, SessionDep, UserAuth
from reservoir.server.app.models import VolumeSetCreate, VolumeSetPublic
from reservoir.server.app.services import volume_sets

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


@router.get("", summary="List the volume sets")
def list_volume_sets(session: SessionDep) -> list[VolumeSetPublic]:
    return [volume_sets.public(v) for v in volume_sets.list_all(session)]


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
