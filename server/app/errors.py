"""The coordinator's errors, translated to HTTP once (``main.py`` registers the handlers):
each is answered as a problem (RFC 9457, :mod:`reservoir.common.problems`) with its
status and its ``code``.

::

    ServerError                      500  server_error
     +-- NotFoundError          404  not_found: "no agent 'x'"
     +-- ConflictError          409  conflict: name taken, still in use, refused state change
     |    +-- IdempotencyKeyReusedError  idempotency_key_reused: the key named another request
     +-- StandbyError           503  not_leader: what only the leader does, asked of a standby
     +-- InvalidRequestError    422  validation_failed: the field in ``errors`` [{loc, msg, type}]
     |    +-- InvalidFieldsError     a campaign file's problems, one entry each
     +-- AgentError             502  bad_gateway: talking to an agent went wrong (agent_client.py)
     |    +-- AgentUnreachableError  agent_unreachable: no useful answer; the scheduler retries
     |    +-- AgentRefusedError      agent_refused: the agent answered with an error status
     |    +-- AgentTokenRefusedError     agent_token_refused: it refused the coordinator's token
     |    +-- ForwardedRefusalError  the agent's own status and code, answered by the routes
     |                               that reach an agent for a user (routes/agent_proxy.py)
     +-- SettingsError               the configuration is unusable (core/config.py; at start)
     +-- SecretKeyError              the key file is unusable (core/secret_key.py; at start)

The domain's errors (:mod:`reservoir.server.domain.errors`) are translated into
these by the services.

Services raise these; routes never build HTTP errors for domain problems.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.responses import Response

from reservoir.common.errors import ReservoirError
from reservoir.common.http_boundary import problem_response
from reservoir.common.problems import summary

__all__ = [
    "ConflictError",
    "IdempotencyKeyReusedError",
    "InvalidRequestError",
    "NotFoundError",
    "ServerError",
    "StandbyError",
    "install_handlers",
]

Loc = Sequence[str | int]


class ServerError(ReservoirError):
    """The root of the coordinator's errors: ``status_code`` and ``code`` are its answer."""

    status_code = status.HTTP_500_INTERNAL_SERVER_ERROR
    code = "server_error"

    def field_errors(self) -> list[dict[str, Any]] | None:
        """The fields refused (a 422's ``errors``), or None."""
        return None


class NotFoundError(ServerError):
    status_code = status.HTTP_404_NOT_FOUND
    code = "not_found"

    def __init__(self, kind: str, ident: str) -> None:
        super().__init__(f"no {kind} {ident!r}")
        self.kind, self.ident = kind, ident


class ConflictError(ServerError):
    status_code = status.HTTP_409_CONFLICT
    code = "conflict"


class IdempotencyKeyReusedError(ConflictError):
    """An Idempotency-Key that an earlier, different request used."""

    code = "idempotency_key_reused"


class StandbyError(ServerError):
    """Asked of a standby coordinator what only the leader does (``leadership.py``)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    code = "not_leader"

    def __init__(self, what: str, leader_url: str | None) -> None:
        where = f"the leader at {leader_url}" if leader_url else "the leader (none leads now)"
        super().__init__(f"this coordinator stands by; {what} runs on {where}")
        self.leader_url = leader_url


class InvalidRequestError(ServerError):
    """A body that is well-formed but does not fit the registry; ``loc`` is the field path."""

    status_code = status.HTTP_422_UNPROCESSABLE_CONTENT
    code = "validation_failed"

    def __init__(self, loc: Loc, msg: str) -> None:
        super().__init__(msg)
        self.loc = ["body", *loc]
        self.msg = msg

    def field_errors(self) -> list[dict[str, Any]] | None:
        return [{"loc": self.loc, "msg": self.msg, "type": "value_error"}]


async def _handle(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServerError)
    errors = exc.field_errors()
    detail = summary(errors) if errors else str(exc)
    return problem_response(request, exc.status_code, detail, code=exc.code, errors=errors)


def install_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServerError, _handle)
