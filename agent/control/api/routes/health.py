"""``GET /health``: no authentication, for load balancers and the coordinator."""

from __future__ import annotations

from fastapi import APIRouter

from reservoir.agent.control.models import Health

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/health")
async def health() -> Health:
    return Health()
