"""Dependencies of the routes, as ``Annotated`` aliases so signatures stay short.

Authentication is ``Authorization: Bearer <token>``. A token is looked up by its
SHA-256 digest among the users' and the agents' (``core/security.py``):

- no token, or one that is neither: 401 with ``WWW-Authenticate: Bearer``;
- an agent's token on a user's endpoint: 403, and a user's token on a heartbeat: 403.

Agents' tokens may only send heartbeats; users' tokens do everything else.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker
from starlette.datastructures import Headers

from reservoir.server.core import security
from reservoir.server.core.config import ServerSettings
from reservoir.server.scheduler import Scheduler

__all__ = [
    "AUTH_RESPONSES",
    "CONFLICT",
    "NOT_FOUND",
    "AgentAuth",
    "Role",
    "SchedulerDep",
    "SessionDep",
    "SettingsDep",
    "UserAuth",
    "get_role",
    "get_session",
    "role_of",
    "token_problem",
]

_bearer = HTTPBearer(auto_error=False, description="a user's or an agent's token")


class Role(StrEnum):
    USER = "user"
    AGENT = "agent"


def get_settings(request: Request) -> ServerSettings:
    settings: ServerSettings = request.app.state.settings
    return settings


SettingsDep = Annotated[ServerSettings, Depends(get_settings)]


def get_session(request: Request) -> Iterator[Session]:
    sessions: sessionmaker[Session] = request.app.state.sessions
    with sessions() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def get_scheduler(request: Request) -> Scheduler:
    scheduler: Scheduler = request.app.state.scheduler
    return scheduler


SchedulerDep = Annotated[Scheduler, Depends(get_scheduler)]


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail=detail, headers={"WWW-Authenticate": "Bearer"}
    )


NO_TOKEN = "a bearer token is required"
BAD_TOKEN = "the token is not valid"


def role_of(token: str, settings: ServerSettings) -> Role | None:
    """Whose ``token`` is, or None."""
    if security.matches(token, settings.user_digests):
        return Role.USER
    if security.matches(token, settings.agent_digests):
        return Role.AGENT
    return None


def token_problem(headers: Headers, settings: ServerSettings) -> str | None:
    """Why ``headers`` do not authenticate (the 401's detail), or None: what
    :func:`get_role` checks, from the headers alone, so the app's boundary checks it
    before a body is read (``reservoir.agent.http_boundary``)."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return NO_TOKEN
    return BAD_TOKEN if role_of(token.strip(), settings) is None else None


def get_role(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Role:
    if credentials is None or not credentials.credentials.strip():
        raise _unauthorized(NO_TOKEN)
    role = role_of(credentials.credentials.strip(), settings)
    if role is None:
        raise _unauthorized(BAD_TOKEN)
    return role


RoleDep = Annotated[Role, Depends(get_role)]


def require_user(role: RoleDep) -> None:
    if role is not Role.USER:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "this endpoint needs a user's token; an agent's token may only send heartbeats",
        )


def require_agent(role: RoleDep) -> None:
    if role is not Role.AGENT:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "heartbeats need an agent's token")


UserAuth = Depends(require_user)
AgentAuth = Depends(require_agent)


def _error(description: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"detail": {"type": "string"}}}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: _error("no bearer token, or not a valid one (WWW-Authenticate: Bearer)"),
    403: _error("a valid token of the wrong kind (user vs agent)"),
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: _error("no such id; the message names it")}
CONFLICT = "the request conflicts with the current state; the message says why"
