"""``/metrics`` for Prometheus (outside ``/api/v1``, as scrapers expect).

It needs a user's bearer token like the rest of the API (transfer ids and agent
names are not for everyone): give the scraper one (``authorization: credentials``
in Prometheus' ``scrape_config``)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from reservoir.server.app import metrics
from reservoir.server.app.api.deps import AUTH_RESPONSES, SessionDep, SettingsDep, UserAuth

__all__ = ["router"]

router = APIRouter(tags=["metrics"], responses=AUTH_RESPONSES, dependencies=[UserAuth])


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus metrics: transfers, streams, caps, NIC pacing rates",
    description=metrics.__doc__,
    responses={
        200: {
            "description": "Prometheus' text exposition format",
            "content": {
                "text/plain": {
                    "schema": {"type": "string"},
                    "example": (
                        'reservoir_transfer_copied_bytes_total{transfer="..."} 1.6777216e+07\n'
                    ),
                }
            },
        }
    },
)
def get_metrics(session: SessionDep, settings: SettingsDep) -> Response:
    text = metrics.render(session, settings.agent_unreachable_after)
    return Response(text, media_type=metrics.CONTENT_TYPE)
