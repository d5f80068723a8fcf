"""The error answers of the project's HTTP APIs (the coordinator's and the agents'
control API): problem details (RFC 9457), declared once here for the servers that
send them and the clients that read them.

Every answer with an error status is ``application/problem+json``::

    {"type": "https://reservoir.invalid/problems/not_found",
     "title": "Not found", "status": 404,
     "detail": "no transfer 'x'",          # the human message, one line
     "instance": "/api/v1/transfers/x",    # the request's path
     "code": "not_found",                  # stable, snake_case: what scripts test
     "request_id": "4b0c...",              # also the answer's X-Request-ID header
     "errors": [{"loc": [...], "msg": "...", "type": "..."}]}  # 422 only

``type`` is :data:`TYPE_BASE` followed by the code: an absolute URI that names the
code and is not meant to be fetched (``.invalid`` is reserved, RFC 2606); ``title``
is the code's, the same on every answer. ``errors`` (on a 422) lists where and what
for each field, never the value sent. :data:`CODES` is the registry of the codes;
the README's table and the OpenAPI ``Problem`` schema are made from it.

Light to import (pydantic and the standard library), so the clients read errors
with the same declaration; answering with them is
:mod:`reservoir.common.http_boundary`'s part.
"""

from __future__ import annotations

import http
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CODES",
    "MEDIA_TYPE",
    "TYPE_BASE",
    "ErrorCode",
    "FieldError",
    "Problem",
    "code_for_status",
    "codes_table",
    "located",
    "problem_body",
    "summary",
    "title_of",
    "type_of",
]

MEDIA_TYPE = "application/problem+json"
TYPE_BASE = "https://reservoir.invalid/problems/"
SUMMARY_ERRORS = 5  # field errors named in a 422's detail; ``errors`` has them all


@dataclass(frozen=True, slots=True)
class ErrorCode:
    """One code: the status it comes with (``4xx``: any other), its title and when it
    is answered."""

    code: str
    status: str
    title: str
    when: str


CODES: dict[str, ErrorCode] = {
    c.code: c
    for c in (
        ErrorCode("bad_request", "400", "Bad request", "the request cannot be read"),
        ErrorCode("unauthorized", "401", "Unauthorized", "no bearer token, or not a valid one"),
        ErrorCode("forbidden", "403", "Forbidden", "a valid token that may not do this"),
        ErrorCode("not_found", "404", "Not found", "no such route, or nothing with this id"),
        ErrorCode("method_not_allowed", "405", "Method not allowed", "the path takes others"),
        ErrorCode("conflict", "409", "Conflict", "the current state does not allow it"),
        ErrorCode("body_too_large", "413", "Request body too large", "over the size limit"),
        ErrorCode("validation_failed", "422", "Validation failed", "fields refused: `errors`"),
        ErrorCode("too_many_requests", "429", "Too many requests", "try again later"),
        ErrorCode("client_error", "4xx", "Client error", "another refusal"),
        ErrorCode(
            "internal_error",
            "500",
            "Internal error",
            "unexpected: the server's log has it under the request id",
        ),
        ErrorCode("bad_gateway", "502", "Bad gateway", "another server gave no usable answer"),
        ErrorCode("unavailable", "503", "Service unavailable", "not possible here and now"),
        ErrorCode("server_error", "5xx", "Server error", "another failure"),
        ErrorCode(
            "idempotency_key_reused",
            "409",
            "Idempotency key reused",
            "coordinator: the Idempotency-Key named another request",
        ),
        ErrorCode(
            "not_leader",
            "503",
            "Not the leader",
            "coordinator: a standby asked what only the leader does (the detail names it)",
        ),
        ErrorCode(
            "agent_unreachable",
            "502",
            "Agent unreachable",
            "coordinator: an agent gave no usable answer",
        ),
        ErrorCode(
            "agent_refused",
            "502",
            "Agent refused",
            "coordinator: an agent refused its request (to a user: the agent's status and code)",
        ),
        ErrorCode(
            "agent_token_refused",
            "502",
            "Agent refused the coordinator's token",
            "coordinator: the agent lacks the digest `reservoir server agent-credentials` prints",
        ),
        ErrorCode(
            "volume_refused",
            "403",
            "Volume refused",
            "agent: a path that is not one of its volumes, or a read-only one written",
        ),
        ErrorCode("port_in_use", "409", "Port in use", "agent: the asked iperf3 port is taken"),
        ErrorCode(
            "iperf_request_invalid",
            "422",
            "iperf3 request invalid",
            "agent: an address, NIC or congestion control this host does not have",
        ),
        ErrorCode(
            "iperf_unavailable",
            "503",
            "iperf3 unavailable",
            "agent: iperf3 is not installed, or NIC pacing is off",
        ),
        ErrorCode("iperf_failed", "500", "iperf3 failed", "agent: iperf3 gave no result"),
    )
}

_BY_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "body_too_large",
    422: "validation_failed",
    429: "too_many_requests",
    500: "internal_error",
    502: "bad_gateway",
    503: "unavailable",
}


def code_for_status(status: int) -> str:
    """The code of an error that has only a status: its own, else ``client_error``
    or ``server_error``."""
    return _BY_STATUS.get(status) or ("server_error" if status >= 500 else "client_error")


def title_of(code: str) -> str:
    """The title of ``code``: the registry's (an unknown code: its words)."""
    known = CODES.get(code)
    return known.title if known else code.replace("_", " ").capitalize()


def type_of(code: str) -> str:
    """The ``type`` URI of ``code``."""
    return TYPE_BASE + code


class FieldError(BaseModel):
    """One refused field of a 422: where (``["body", "pacing", "margin"]``), what was
    wrong and pydantic's error type; never the value sent."""

    loc: list[str | int]
    msg: str
    type: str


def _codes_description() -> str:
    lines = [f"- `{c.code}` ({c.status}): {c.title}: {c.when}" for c in CODES.values()]
    return "A stable code that scripts may test:\n\n" + "\n".join(lines)


class Problem(BaseModel):
    """An error answer: problem details (RFC 9457) with a code and a request id."""

    model_config = ConfigDict(title="Problem")

    type: str = Field(description=f"{TYPE_BASE}<code>", examples=[TYPE_BASE + "not_found"])
    title: str = Field(description="the code's title, the same on every answer")
    status: int = Field(description="the HTTP status", ge=400, le=599)
    detail: str = Field(description="what went wrong, one line for a person")
    instance: str = Field(description="the request's path")
    code: str = Field(description=_codes_description(), examples=["not_found"])
    request_id: str = Field(description="the request's id, as in the X-Request-ID header")
    errors: list[FieldError] | None = Field(
        default=None, description="422: each refused field (never the value sent)"
    )


def located(error: Mapping[str, Any]) -> str:
    """``pacing.margin: Input should be ...``: a field error's place (without the
    leading ``body``) and message."""
    loc = [str(p) for p in error.get("loc") or ()]
    where = ".".join(loc[1:] if loc[:1] == ["body"] else loc)
    msg = str(error.get("msg", "")).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


def summary(errors: Sequence[Mapping[str, Any]]) -> str:
    """A 422's ``detail``: its first field errors, one ``place: message`` each."""
    named = "; ".join(located(e) for e in errors[:SUMMARY_ERRORS])
    more = len(errors) - SUMMARY_ERRORS
    return f"{named} (and {more} more)" if more > 0 else named or "the request is not valid"


def problem_body(
    status: int,
    detail: str,
    *,
    instance: str,
    request_id: str,
    code: str | None = None,
    errors: Iterable[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The JSON object of an error answer; ``code`` defaults to the status's."""
    code = code or code_for_status(status)
    body: dict[str, Any] = {
        "type": type_of(code),
        "title": title_of(code),
        "status": status,
        "detail": detail or _reason(status),
        "instance": instance,
        "code": code,
        "request_id": request_id,
    }
    if errors is not None:
        body["errors"] = [
            {
                "loc": list(e.get("loc", ())),
                "msg": str(e.get("msg", "")),
                "type": str(e.get("type", "")),
            }
            for e in errors
        ]
    return body


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


def codes_table() -> str:
    """The codes as a Markdown table (the README's)."""
    rows = [f"| `{c.code}` | {c.status} | {c.title} | {c.when} |" for c in CODES.values()]
    return "\n".join(["| code | status | title | when |", "| --- | --- | --- | --- |", *rows])
