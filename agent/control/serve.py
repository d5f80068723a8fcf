"""``reservoir agent serve``: the control API (uvicorn) and the builtin target in one loop."""

from __future__ import annotations

import logging
import socket

import uvicorn

from reservoir.agent.control.agent import Agent
from reservoir.agent.control.core.config import AgentSettings
from reservoir.agent.control.main import create_app

__all__ = ["make_server"]


log = logging.getLogger("reservoir.agent")

LOOPBACK = ("127.0.0.1", "::1", "localhost")


class AgentServer(uvicorn.Server):
    """uvicorn, answering the copies' long waits first when it stops: it waits for
    every request under way before the agent's own shutdown runs."""

    def __init__(self, config: uvicorn.Config, agent: Agent) -> None:
        super().__init__(config)
        self.agent = agent

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.agent.manager.stop_waits()
        await super().shutdown(sockets)


def make_server(settings: AgentSettings, agent: Agent | None = None) -> uvicorn.Server:
    """A uvicorn server for the agent; ``run()`` serves until SIGINT/SIGTERM."""
    agent = agent or Agent(settings)
    app = create_app(agent)
    if settings.tls_cert is None and settings.host not in LOOPBACK:
        log.warning(
            "the control API listens on %s without TLS: tokens travel in clear", settings.listen
        )
    level = logging.getLogger().getEffectiveLevel()
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        lifespan="on",
        log_level=level,
        access_log=False,
        server_header=False,
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
    )
    return AgentServer(config, agent)
