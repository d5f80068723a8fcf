"""A request id for every request of the project's HTTP APIs, from the client's
``X-Request-ID`` when it gives a sane one, else made here.

:class:`RequestIdMiddleware` (pure ASGI, the outermost of an app's own middleware)
chooses the id, keeps it in the request's scope and in :data:`current_request_id`
while the request is answered, and echoes it in the ``X-Request-ID`` header of every
answer, a success as well as an error; the error answers carry it in their body too
(:mod:`reservoir.common.problems`). :class:`RequestIdFilter` gives each log record
the id of the request it was logged for (``request_id``, None outside a request), so
the JSON log lines (:mod:`reservoir.common.logs`) of one request can be found by its
id; the coordinator passes its id on to the agents it calls, so one id follows a
request through both logs.

Light to import: the standard library only.
"""

from __future__ import annotations

import logging
import re
import uuid
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "HEADER",
    "SCOPE_KEY",
    "RequestIdFilter",
    "RequestIdMiddleware",
    "current_request_id",
    "is_sane",
    "new_request_id",
    "request_id_of",
]

HEADER = "X-Request-ID"
SCOPE_KEY = "reservoir.request_id"
MAX_LENGTH = 128
_SANE = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_LENGTH}}}")
_HEADER_KEY = HEADER.lower().encode()

current_request_id: ContextVar[str | None] = ContextVar("reservoir_request_id", default=None)
"""The id of the request being answered in this context, or None outside a request."""


def is_sane(value: str) -> bool:
    """Whether a client's ``value`` may serve as a request id: 1 to 128 characters of
    letters, digits, ``.``, ``_`` and ``-`` (nothing a log line or header could
    misread)."""
    return _SANE.fullmatch(value) is not None


def new_request_id() -> str:
    """A fresh id: 32 hex digits (a random UUID)."""
    return uuid.uuid4().hex


def _given(scope: Scope) -> str | None:
    """The client's ``X-Request-ID`` if it is sane (the first one, if several)."""
    for key, value in scope.get("headers", ()):
        if key.lower() == _HEADER_KEY:
            text = value.decode("latin-1")
            return text if is_sane(text) else None
    return None


def request_id_of(scope: Scope) -> str:
    """The id of the request of ``scope``: the one the middleware chose, else the
    context's, else a fresh one, kept in the scope so every answer to it agrees."""
    chosen = scope.get(SCOPE_KEY) or current_request_id.get()
    if chosen is None:
        chosen = scope[SCOPE_KEY] = new_request_id()
    return str(chosen)


def _with_header(message: Message, request_id: str) -> Message:
    """The ``http.response.start`` ``message`` with ``X-Request-ID: request_id`` as its
    only request id header."""
    headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != _HEADER_KEY]
    headers.append((_HEADER_KEY, request_id.encode()))
    return {**message, "headers": headers}


class RequestIdMiddleware:
    """Chooses the request's id (the client's if sane, else a new one), keeps it in
    ``scope[SCOPE_KEY]`` and :data:`current_request_id`, and puts it in the answer's
    ``X-Request-ID`` header."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _given(scope) or new_request_id()
        scope[SCOPE_KEY] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = _with_header(message, request_id)
            await send(message)

        token = current_request_id.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            current_request_id.reset(token)


class RequestIdFilter(logging.Filter):
    """Sets ``record.request_id`` to the id of the request being answered (None
    outside a request), unless the record has one already; lets every record pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = current_request_id.get()
        return True
