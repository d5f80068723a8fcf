"""Builds the FastAPI application of the agent (and nothing else)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI

from reservoir import __version__
from reservoir.agent.control import metrics
from reservoir.agent.control.agent import Agent
from reservoir.agent.control.api.deps import require_token, token_problem
from reservoir.agent.control.api.routes import copies, health, info, iperf, volumes
from reservoir.agent.control.api.routes import metrics as metrics_route
from reservoir.agent.control.errors import install_handlers
from reservoir.common.http_boundary import BodyLimit, protect
from reservoir.common.openapi import operation_id

__all__ = ["API_PREFIX", "create_app"]

API_PREFIX = "/api/v1"


def create_app(agent: Agent) -> FastAPI:
    """The app; its lifespan starts and stops ``agent`` (target, copies) in the server's loop."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await agent.start()
        try:
            yield
        finally:
            await agent.stop()

    app = FastAPI(
        title=f"Reservoir agent {agent.settings.name}",
        version=__version__,
        lifespan=lifespan,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=None,
        redoc_url=None,
        generate_unique_id_function=operation_id,
    )
    app.state.agent = agent
    # read at each scrape of /metrics, the telemetry files first, in a thread
    app.state.metrics, app.state.metrics_collector = metrics.registry(agent)
    settings = agent.settings
    protect(  # bodies bounded, tokens checked before a body is read, NaN refused
        app,
        limit=BodyLimit(settings.max_body_bytes, "max_body_bytes"),
        token_dependency=require_token,
        check_token=lambda headers: token_problem(headers, agent.settings),
    )
    install_handlers(app)
    api = APIRouter(prefix=API_PREFIX)
    for module in (health, info, volumes, copies, iperf):
        api.include_router(module.router)
    app.include_router(api)
    app.include_router(metrics_route.router)  # /metrics, where Prometheus looks
    return app
