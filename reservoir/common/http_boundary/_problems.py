"""Every error answer of an app as problem details (:mod:`reservoir.common.problems`),
with the request's id.

:func:`install_problems` makes an app answer this way:

- an HTTP error (an unknown route's 404, a 405, a token refused with 401 or 403, the
  boundary's refusals) by its status, or by the ``code`` it carries;
- a request that does not validate: 422 ``validation_failed``, its field errors in
  ``errors`` (:func:`public_errors`: never the input) and named in ``detail``;
- an exception nothing handled: 500 ``internal_error`` whose detail says nothing of
  it; the traceback is logged with the request id (:class:`UnhandledErrorMiddleware`);
- and every answer, an error or not, with the request's ``X-Request-ID``
  (:class:`~reservoir.common.request_id.RequestIdMiddleware`).

An app's own errors are answered with :func:`problem_response` by its handlers; the
OpenAPI document describes every error answer with the ``Problem`` schema.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reservoir.common.problems import MEDIA_TYPE, FieldError, Problem, problem_body, summary
from reservoir.common.request_id import HEADER, RequestIdMiddleware, request_id_of

from ._validation import public_errors

__all__ = [
    "ProblemResponse",
    "UnhandledErrorMiddleware",
    "install_problems",
    "problem_response",
    "send_problem",
]

log = logging.getLogger("reservoir.http")

UNEXPECTED = "an unexpected error; the server's log has it under this request id"
Errors = Iterable[Mapping[str, Any]] | None


class ProblemResponse(JSONResponse):
    """A problem as JSON, of the media type ``application/problem+json``."""

    media_type = MEDIA_TYPE


def problem_response(
    request: Request,
    status: int,
    detail: str,
    *,
    code: str | None = None,
    errors: Errors = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """The error answer ``status`` to ``request``: ``detail`` for a person, ``code``
    (default: the status's) and the request's id, in the body and in the header."""
    request_id = request_id_of(request.scope)
    body = problem_body(
        status,
        detail,
        instance=request.scope["path"],
        request_id=request_id,
        code=code,
        errors=errors,
    )
    return ProblemResponse(
        body, status_code=status, headers={**(headers or {}), HEADER: request_id}
    )


def _parts(exc: HTTPException) -> tuple[str, str | None, list[dict[str, Any]] | None]:
    """``detail``, ``code`` and ``errors`` of an HTTP error: the code and field errors
    it carries (the boundary's refusals do), else a list detail read as field errors."""
    code: str | None = getattr(exc, "code", None)
    errors: list[dict[str, Any]] | None = getattr(exc, "errors", None)
    detail: object = exc.detail  # FastAPI's HTTPException takes any JSON
    if isinstance(detail, list):
        errors = public_errors([e for e in detail if isinstance(e, Mapping)])
        return summary(errors), code, errors
    return str(detail), code, errors


def _said(scope: Scope, status: int, detail: str) -> str:
    """The router's bare 404 and 405 (the status's phrase) as sentences on the request."""
    if status == 404 and detail == "Not Found":
        return f"nothing at {scope['path']}"
    if status == 405 and detail == "Method Not Allowed":
        return f"{scope['path']} does not take {scope['method']}"
    return detail


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    detail, code, errors = _parts(exc)
    detail = _said(request.scope, exc.status_code, detail)
    return problem_response(
        request, exc.status_code, detail, code=code, errors=errors, headers=exc.headers
    )


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = public_errors(exc.errors())
    return problem_response(request, 422, summary(errors), code="validation_failed", errors=errors)


async def send_problem(scope: Scope, send: Send, exc: HTTPException) -> None:
    """Answers the HTTP error ``exc`` straight to the ASGI server, for a middleware
    that refuses a request outside the app's error handling."""
    detail, code, errors = _parts(exc)
    await _send(scope, send, exc.status_code, detail, code=code, errors=errors, headers=exc.headers)


async def _send(
    scope: Scope,
    send: Send,
    status: int,
    detail: str,
    *,
    code: str | None,
    errors: Errors = None,
    headers: Mapping[str, str] | None = None,
) -> None:
    """The problem straight to the ASGI server (as :func:`problem_response` builds it)."""
    request_id = request_id_of(scope)
    problem = problem_body(
        status, detail, instance=scope["path"], request_id=request_id, code=code, errors=errors
    )
    body = json.dumps(problem).encode()
    fields = [(b"content-type", MEDIA_TYPE.encode()), (b"content-length", b"%d" % len(body))]
    fields += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    fields.append((HEADER.lower().encode(), request_id.encode()))
    await send({"type": "http.response.start", "status": status, "headers": fields})
    await send({"type": "http.response.body", "body": body})


class Watched:
    """``send`` that remembers whether the answer has started."""

    def __init__(self, send: Send) -> None:
        self.send, self.started = send, False

    async def __call__(self, message: Message) -> None:
        self.started = self.started or message["type"] == "http.response.start"
        await self.send(message)


class UnhandledErrorMiddleware:
    """An exception that escapes the app before its answer started: logged with its
    traceback (and the request id, :class:`~reservoir.common.request_id.RequestIdFilter`),
    answered 500 ``internal_error`` without a word of it. One raised once the answer
    started goes on to the server, which closes the connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        watched = Watched(send)
        try:
            await self.app(scope, receive, watched)
        except Exception:
            if watched.started:
                raise
            log.exception("%s %s: unexpected error", scope["method"], scope["path"])
            await _send(scope, send, 500, UNEXPECTED, code="internal_error")


def _problem_schemas() -> dict[str, Any]:
    """The ``Problem`` and ``FieldError`` schemas, for ``components.schemas``."""
    template = "#/components/schemas/{model}"
    schema = Problem.model_json_schema(ref_template=template)
    found: dict[str, Any] = schema.pop("$defs", {})
    found.setdefault("FieldError", FieldError.model_json_schema(ref_template=template))
    return {**found, "Problem": schema}


PROBLEM_CONTENT = {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
DEFAULT_ERROR = "an error, as problem details (RFC 9457); `code` says which"
UNUSED = ("HTTPValidationError", "ValidationError")  # FastAPI's 422 schemas, replaced
ID_HEADER = {
    HEADER: {
        "description": "the request's id: the client's own if sane, else a new one",
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,128}$"},
    }
}


def _is_error(status: str) -> bool:
    """Whether a response of the document (``"404"``, ``"4XX"``, ``"default"``) is an error."""
    return status == "default" or status[:1] in ("4", "5")


def _unreferenced(schema: dict[str, Any], name: str) -> bool:
    return f'"#/components/schemas/{name}"' not in json.dumps(schema)


def _document(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (an OpenAPI document) with every error answer a ``Problem``, and
    every answer's ``X-Request-ID`` header."""
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            responses.setdefault("default", {"description": DEFAULT_ERROR})
            for status, response in responses.items():
                response.setdefault("headers", {}).update(copy.deepcopy(ID_HEADER))
                if _is_error(status):
                    response["content"] = copy.deepcopy(PROBLEM_CONTENT)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in UNUSED:
        if _unreferenced(schema, name):
            components.pop(name, None)
    components.update(_problem_schemas())
    return schema


def _documented(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """``app.openapi`` whose document describes the error answers as problems."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document(build())
        return app.openapi_schema

    return openapi


def install_problems(app: FastAPI) -> None:
    """Makes ``app`` answer every error as a problem with the request's id, and say so
    in its OpenAPI document. Call it after adding the app's other middleware (the
    boundary's), so that the request id is chosen before them and reaches their
    answers too."""
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_middleware(UnhandledErrorMiddleware)
    app.add_middleware(RequestIdMiddleware)
    app.openapi = _documented(app)  # type: ignore[method-assign]
