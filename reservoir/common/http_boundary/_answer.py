"""An answer sent straight to the ASGI server, for a middleware that refuses a request
before the app has seen it."""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.types import Send

__all__ = ["answer"]


async def answer(
    send: Send, status: int, detail: object, headers: Mapping[str, str] | None = None
) -> None:
    """``{"detail": detail}`` as JSON with ``status`` (the shape of FastAPI's errors)."""
    body = json.dumps({"detail": detail}).encode()
    fields = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    fields += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": fields})
    await send({"type": "http.response.body", "body": body})
