"""The middleware of the boundary: it hands the app a ``receive`` that, before the
first byte of a body, checks the token (where the route needs one) and the declared
length; then counts the body as it comes; and at the end of a JSON body, looks for NaN.
A refusal is answered by the app's error handling, or here when it escapes the app
(as a problem, ``_problems.py``)."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._body_limit import BodyLimit, BodyTooLargeError, content_length
from ._finite_json import JsonWatch, is_json
from ._problems import Watched, send_problem
from ._refusal import RefusedError
from ._token_first import TokenRoutes

__all__ = ["BoundaryMiddleware"]


class _GuardedReceive:
    def __init__(self, scope: Scope, receive: Receive, limit: BodyLimit, tokens: TokenRoutes):
        self.scope, self.receive, self.limit, self.tokens = scope, receive, limit, tokens
        self.started, self.seen = False, 0
        self.json = JsonWatch() if is_json(Headers(scope=scope)) else None

    async def __call__(self) -> Message:
        if not self.started:
            self.started = True
            self._before_the_body()
        message = await self.receive()
        if message["type"] == "http.request":
            self._count(message.get("body", b""), message.get("more_body", False))
        return message

    def _before_the_body(self) -> None:
        self.tokens.refuse_unauthenticated(self.scope)
        declared = content_length(self.scope)
        if declared is not None and declared > self.limit.size:
            raise BodyTooLargeError(self.limit)

    def _count(self, chunk: bytes, more: bool) -> None:
        self.seen += len(chunk)
        if self.seen > self.limit.size:
            raise BodyTooLargeError(self.limit)
        if self.json is not None:
            self.json.add(chunk)
            if not more:
                self.json.end()


class BoundaryMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: BodyLimit,
        larger: Mapping[str, BodyLimit] | None,
        tokens: TokenRoutes,
    ) -> None:
        self.app, self.limit, self.larger, self.tokens = app, limit, dict(larger or {}), tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.larger.get(scope["path"], self.limit)
        watched = Watched(send)
        try:
            await self.app(scope, _GuardedReceive(scope, receive, limit, self.tokens), watched)
        except RefusedError as exc:
            if watched.started:
                raise
            await send_problem(scope, send, exc)
