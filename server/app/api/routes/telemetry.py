"""Telemetry of a transfer: ``/transfers/{id}/streams`` (the per-stream history),
``/transfers/{id}/pacing`` (its NIC pacing rates) and ``/transfers/{id}/live``
(server-sent events for the dashboard)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session, sessionmaker

from reservoir.server.app.api.deps import AUTH_RESPONSES, NOT_FOUND, SessionDep, UserAuth
from reservoir.server.app.models import NicPacingPublic, StreamSamplePublic
from reservoir.server.app.services import transfers
from reservoir.server.domain import telemetry

__all__ = ["LIVE_INTERVAL", "router"]

router = APIRouter(
    prefix="/transfers", tags=["telemetry"], responses=AUTH_RESPONSES, dependencies=[UserAuth]
)

TransferId = Annotated[str, Path(description="transfer id", max_length=36)]
LIVE_INTERVAL = 0.5  # seconds between the live feed's looks at the database
KEEPALIVE = 15.0  # seconds of silence before a comment line keeps proxies from closing


@router.get(
    "/{transfer_id}/streams",
    responses=NOT_FOUND,
    summary="Per-stream telemetry samples of a transfer, newest last",
    description=(
        "Samples later than `since` and not later than `until` (Unix seconds, the agents' "
        "clocks), at most `limit` of the newest, ordered oldest first. Poll with `since` = "
        "the last `time` seen; page back through a long history with `until` = the first "
        "`time` of the previous page (samples at that time come again: skip those seen). "
        "The coordinator keeps each transfer's last two hours (and at most 200000 rows)."
    ),
)
def transfer_streams(
    transfer_id: TransferId,
    session: SessionDep,
    since: Annotated[float | None, Query(description="only samples after this time")] = None,
    until: Annotated[float | None, Query(description="only samples at or before this time")] = None,
    limit: Annotated[int, Query(ge=1, le=10_000, description="at most this many")] = 1000,
) -> list[StreamSamplePublic]:
    transfers.get(session, transfer_id)
    samples = telemetry.list_samples(session, transfer_id, since=since, until=until, limit=limit)
    return [StreamSamplePublic.model_validate(telemetry.sample_dict(s)) for s in samples]


@router.get(
    "/{transfer_id}/pacing",
    responses=NOT_FOUND,
    summary="The NIC pacing rates of a transfer, as its source agents last reported them",
)
def transfer_pacing(transfer_id: TransferId, session: SessionDep) -> list[NicPacingPublic]:
    transfers.get(session, transfer_id)
    return [
        NicPacingPublic(
            agent=name, nic=rate.nic, rate_bytes_per_second=rate.rate, updated_at=rate.updated_at
        )
        for rate, name in telemetry.nic_pacing(session, [transfer_id])
    ]


def _sse(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


LIVE_DOC = """Server-sent events (`text/event-stream`) until the transfer is completed or
cancelled (or the client goes away):

- `transfer`: `{id, state, done_bytes, total_bytes, last_error, updated_at}`, first
  and on every change;
- `event`: one per event row of the transfer (its history first, then new ones), as
  `GET /transfers/{id}/events` gives them;
- `samples`: a list of new per-stream samples (as `/streams` gives them), only
  samples collected after the feed was opened.

A comment line is sent after 15 s of silence."""


@router.get(
    "/{transfer_id}/live",
    response_class=StreamingResponse,
    summary="Live telemetry, state and events of a transfer (server-sent events)",
    description=LIVE_DOC,
    responses={
        **NOT_FOUND,
        200: {
            "description": "the event stream",
            "content": {
                "text/event-stream": {
                    "schema": {"type": "string"},
                    "example": 'event: transfer\ndata: {"id":"...","state":"running",'
                    '"done_bytes":1048576,"total_bytes":33554432,"last_error":null,'
                    '"updated_at":"2026-11-21T15:30:00+00:00"}\n\n',
                }
            },
        },
    },
)
async def transfer_live(transfer_id: TransferId, request: Request) -> StreamingResponse:
    sessions: sessionmaker[Session] = request.app.state.sessions
    interval: float = getattr(request.app.state, "live_interval", LIVE_INTERVAL)

    def opening() -> int:
        with sessions() as session:
            transfers.get(session, transfer_id)  # 404 before the stream starts
            return telemetry.newest_sample_id(session, transfer_id)

    cursor = telemetry.LiveCursor(sample_id=await run_in_threadpool(opening))

    def poll() -> tuple[list[tuple[str, Any]], bool]:
        with sessions() as session:
            return telemetry.live_poll(session, transfer_id, cursor)

    async def feed() -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while True:
            items, final = await run_in_threadpool(poll)
            for name, data in items:
                yield _sse(name, data)
            if items:
                quiet_since = loop.time()
            elif loop.time() - quiet_since > KEEPALIVE:
                quiet_since = loop.time()
                yield ": keepalive\n\n"
            if final or await request.is_disconnected():
                return
            await asyncio.sleep(interval)

    return StreamingResponse(
        feed(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
