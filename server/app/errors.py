"""The coordinator's errors, translated to HTTP once (``main.py`` registers the handlers).

::

    ServerError                      500
     +-- NotFoundError          404  "no agent 'x'"
     +-- ConflictError          409  name taken, still in use, refused state change
     +-- InvalidRequestError    422  FastAPI's shape: detail = [{loc, msg, type}]
     |    +-- InvalidFieldsError     a campaign file's problems, one entry each
     +-- AgentError             502  talking to an agent went wrong (agent_client.py)
     |    +-- AgentUnreachableError  no useful answer; the scheduler retries
     |    +-- AgentRefusedError      the agent answered with an error status
     +-- SettingsError               the configuration is unusable (core/config.py; at start)
     +-- SecretKeyError              the key file is unusable (core/secret_key.py; at start)

The domain's errors (:mod:`reservoir.server.domain.errors`) are translated into
these by the services.

Services raise these; routes never build HTTP errors for domain problems.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse

from reservoir.common.errors import ReservoirError

__all__ = [
    "ConflictError",
    "InvalidRequestError",
    "NotFoundError",
    "ServerError",
    "install_handlers",
]

Loc = Sequence[str | int]


class ServerError(ReservoirError):
    status_code = status.HTTP_500_INTERNAL_SERVER_ERROR

    def detail(self) -> object:
        return str(self)


class NotFoundError(ServerError):
    status_code = status.HTTP_404_NOT_FOUND

    def __init__(self, kind: str, ident: str) -> None:
        super().__init__(f"no {kind} {ident!r}")
        self.kind, self.ident = kind, ident


class ConflictError(ServerError):
    status_code = status.HTTP_409_CONFLICT


class InvalidRequestError(ServerError):
    """A body that is well-formed but does not fit the registry; ``loc`` is the field path."""

    status_code = status.HTTP_422_UNPROCESSABLE_CONTENT

    def __init__(self, loc: Loc, msg: str) -> None:
        super().__init__(msg)
        self.loc = ["body", *loc]
        self.msg = msg

    def detail(self) -> object:
        return [{"loc": self.loc, "msg": self.msg, "type": "value_error"}]


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServerError)
    return JSONResponse({"detail": exc.detail()}, status_code=exc.status_code)


def install_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServerError, _handle)
