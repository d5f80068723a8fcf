"""``GET /health``: no authentication, for load balancers and agents."""

from __future__ import annotations

from fastapi import APIRouter

from reservoir.server.app.models import Health

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/health", summary="Whether the coordinator is up")
def health() -> Health:
    return Health()
