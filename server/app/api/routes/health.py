"""``GET /health``: no authentication, for load balancers and agents."""

from __future__ import annotations

from fastapi import APIRouter, Request

from reservoir.server.app.leadership import Leadership, current_lease
from reservoir.server.app.models import Health

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/health", summary="Whether the coordinator is up, and whether it leads")
def health(request: Request) -> Health:
    leadership: Leadership | None = request.app.state.leadership
    if leadership is None:
        return Health()
    if leadership.leading:
        return Health(role="leader", leader_url=leadership.url)
    lease = current_lease(request.app.state.sessions)
    return Health(role="standby", leader_url=lease.leader_url if lease is not None else None)
