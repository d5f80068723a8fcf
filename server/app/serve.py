"""``reservoir server``: the coordinator's API on uvicorn."""

from __future__ import annotations

import logging

import uvicorn

from reservoir.server.app.core.config import ServerSettings
from reservoir.server.app.main import create_app

__all__ = ["make_server"]

log = logging.getLogger("reservoir.server")

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def make_server(settings: ServerSettings) -> uvicorn.Server:
    """A uvicorn server for the coordinator; ``run()`` serves until SIGINT/SIGTERM."""
    app = create_app(settings)
    if settings.host not in LOOPBACK and settings.tls_cert is None:
        log.warning(
            "the API listens on %s without TLS (tls_cert, tls_key): tokens travel in clear "
            "unless a TLS proxy is in front",
            settings.listen,
        )
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        lifespan="on",
        log_level=logging.getLogger().getEffectiveLevel(),
        access_log=False,
        server_header=False,
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
    )
    return uvicorn.Server(config)
