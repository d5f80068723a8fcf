"""What the project's HTTP APIs call their operations in OpenAPI."""

from __future__ import annotations

from fastapi.routing import APIRoute

__all__ = ["operation_id"]


def operation_id(route: APIRoute) -> str:
    """A route's operationId: its function's name (``create_transfer``, ``list_agents``),
    what a generated client names the call; each app's test keeps them unique."""
    return route.name
