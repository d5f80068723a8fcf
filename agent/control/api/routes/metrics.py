"""``/metrics`` for Prometheus (outside ``/api/v1``, as scrapers expect)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, generate_latest

from reservoir.agent.control import metrics
from reservoir.agent.control.api.deps import Authorized

__all__ = ["router"]

router = APIRouter(tags=["metrics"], dependencies=[Authorized])

AUTHENTICATION = """It needs one of the agent's tokens like the rest of its API
(``Authorization: Bearer <token>``; 401 without): copy ids, paths and NIC names are not
for everyone. Give the scraper one (``authorization: credentials_file`` in Prometheus'
``scrape_config``, see ``config/prometheus/prometheus.yml``).

"""


def get_registry(request: Request) -> CollectorRegistry:
    """The app's registry (:func:`reservoir.agent.control.metrics.registry`)."""
    registry: CollectorRegistry = request.app.state.metrics
    return registry


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus metrics: copies, streams, paths, NIC pacing, target, storage",
    description=AUTHENTICATION + (metrics.__doc__ or ""),
    responses={
        200: {
            "description": "Prometheus' text exposition format",
            "content": {
                "text/plain": {
                    "schema": {"type": "string"},
                    "example": 'reservoir_copy_copied_bytes_total{copy="..."} 1.6777216e+07\n',
                }
            },
        }
    },
)
async def get_metrics(request: Request) -> Response:
    collector: metrics.AgentCollector = request.app.state.metrics_collector
    await collector.read_telemetry()
    return Response(generate_latest(get_registry(request)), media_type=metrics.CONTENT_TYPE)
