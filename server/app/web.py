"""The dashboard (``web/``) served by the coordinator at ``/``.

``make install`` (``scripts/install.sh``) builds it: ``npm ci`` and ``npm run build``
in ``web/`` write ``web/dist`` (the ES modules and uPlot's files, no network needed at
run time). :func:`mount` serves that folder at ``/`` after the API's routes, so
``/api/v1``, ``/metrics`` and the OpenAPI schema are unchanged (a mount is not in the
schema). Without the folder, ``/`` answers 503 with a plain message saying how to
build it, and a path under ``/api/`` that no route took is the API's 404 all the same.
The dashboard reads the same REST and live endpoints as any client.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, HTTPException
from fastapi.staticfiles import StaticFiles
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocketClose

from reservoir.shipped import dashboard_dir

__all__ = ["DIST", "mount"]

DIST = dashboard_dir()
NOT_BUILT = (
    "The Reservoir dashboard is not built on this coordinator: run `make install` "
    "(it runs `npm ci` and `npm run build` in web/). The API is at /api/v1.\n"
)


async def _not_built(scope: Scope, receive: Receive, send: Send) -> None:
    """503 with a plain message, for every path the API's routes did not take; under
    ``/api/``, the API's 404 (a problem, like every error of the API)."""
    if scope["type"] == "websocket":
        await WebSocketClose(code=1013)(scope, receive, send)  # 1013: try again later
        return
    if scope["path"].startswith("/api/"):
        raise HTTPException(404)
    response = PlainTextResponse(NOT_BUILT, status_code=503, headers={"Retry-After": "3600"})
    await response(scope, receive, send)


def mount(app: FastAPI, folder: Path | None = None) -> None:
    """Serves ``folder`` (default: ``web/dist``) at ``/``; call it after the routers."""
    folder = DIST if folder is None else folder
    if (folder / "index.html").is_file():
        app.mount("/", StaticFiles(directory=folder, html=True), name="web")
    else:
        app.mount("/", _not_built, name="web")
