"""``/links``: paths between NICs of two agents, with capacity and RTT."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response, status
from sqlalchemy import select

from reservoir.server.app.api.deps import (
    AUTH_RESPONSES,
    NOT_FOUND,
    PAGED,
    STANDBY_RESPONSE,
    LeaderOnly,
    PageQuery,
    SessionDep,
    UserAuth,
)
from reservoir.server.app.models import LinkCreate, LinkPublic, ProbeCreate
from reservoir.server.app.services import links, pages
from reservoir.server.app.tables import Link
from reservoir.server.domain.probe import LinkProber

__all__ = ["router"]

router = APIRouter(
    prefix="/links", tags=["links"], responses=AUTH_RESPONSES, dependencies=[UserAuth]
)

LinkId = Annotated[str, Path(description="link id", max_length=36)]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    summary="Declare (or record a measured) link between two agents' NICs",
    responses={409: {"description": "a link of that name exists"}},
)
def create_link(body: LinkCreate, session: SessionDep) -> LinkPublic:
    return links.public(links.create(session, body))


@router.get("", summary="List the links", responses=PAGED)
def list_links(
    session: SessionDep, request: Request, response: Response, query: PageQuery
) -> list[LinkPublic]:
    found = pages.page(
        session, select(Link), Link.created_at, Link.id,
        limit=query.limit, cursor=query.cursor,
    )  # fmt: skip
    pages.link_next(request, response, found.next_cursor)
    return [links.public(link) for link in found.items]


@router.get("/{link_id}", responses=NOT_FOUND, summary="One link")
def get_link(link_id: LinkId, session: SessionDep) -> LinkPublic:
    return links.public(links.get(session, link_id))


@router.delete(
    "/{link_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Remove a link no transfer uses",
    responses=NOT_FOUND | {409: {"description": "a path of a transfer"}},
)
def delete_link(link_id: LinkId, session: SessionDep) -> None:
    links.delete(session, link_id)


@router.post(
    "/{link_id}/probe",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Measure the link with iperf3 through its agents; recommend streams and pacing",
    responses=NOT_FOUND
    | STANDBY_RESPONSE
    | {409: {"description": "a probe of the link is running"}},
    dependencies=[LeaderOnly],
)
async def probe_link(
    link_id: LinkId, session: SessionDep, request: Request, body: ProbeCreate | None = None
) -> LinkPublic:
    """Answers at once with ``probe.state`` ``running``; ``GET /links/{id}`` shows the
    probe ``completed`` with the ``recommendation``, or ``failed`` with its error."""
    prober: LinkProber = request.app.state.prober
    return links.public(links.probe(session, link_id, body or ProbeCreate(), prober))
