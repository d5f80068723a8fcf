"""Dependencies of the routes, as ``Annotated`` aliases so signatures stay short.

Authentication is ``Authorization: Bearer <token>``. A user's token is looked up by
its SHA-256 digest among the configured ones (:mod:`reservoir.common.tokens`); an
agent's token is its heartbeat token, recomputed from the coordinator's key and the
agent's name (``core/agent_credentials.py``) and compared in constant time:

- no token, or one that is neither a user's nor a registered agent's: 401 with
  ``WWW-Authenticate: Bearer``;
- an agent's token on a user's endpoint: 403, and a user's token on a heartbeat: 403;
- an agent's token on another agent's heartbeat: 403 (each agent speaks for itself).

Agents' tokens may only send their own heartbeats; users' tokens do everything else.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Path, Query, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from starlette.datastructures import Headers

from reservoir.common import tokens as token_rule
from reservoir.server.app.core.agent_credentials import AgentCredentials
from reservoir.server.app.core.config import ServerSettings
from reservoir.server.app.errors import NotFoundError, StandbyError
from reservoir.server.app.leadership import Leadership, current_lease
from reservoir.server.app.models import LABEL_FILTER
from reservoir.server.app.services import pages
from reservoir.server.app.tables import Agent
from reservoir.server.domain.scheduler import Scheduler

__all__ = [
    "AUTH_RESPONSES",
    "CONFLICT",
    "NOT_FOUND",
    "PAGED",
    "STANDBY_RESPONSE",
    "AgentAuth",
    "CredentialsDep",
    "HeartbeatSender",
    "LabelledPageParams",
    "LeaderOnly",
    "PageParams",
    "PageQuery",
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


def get_credentials(request: Request) -> AgentCredentials:
    credentials: AgentCredentials = request.app.state.credentials
    return credentials


CredentialsDep = Annotated[AgentCredentials, Depends(get_credentials)]


def get_session(request: Request) -> Iterator[Session]:
    sessions: sessionmaker[Session] = request.app.state.sessions
    with sessions() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def get_scheduler(request: Request) -> Scheduler:
    scheduler: Scheduler = request.app.state.scheduler
    return scheduler


SchedulerDep = Annotated[Scheduler, Depends(get_scheduler)]


class PageParams(BaseModel):
    """``limit`` and ``cursor`` of a list (``services/pages.py``); others are refused."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=pages.DEFAULT_LIMIT, ge=1, le=pages.MAX_LIMIT)
    cursor: str | None = Field(
        default=None, max_length=512, description="the next page's, from X-Next-Cursor"
    )


class LabelledPageParams(PageParams):
    """A page of a list whose items carry labels, and the labels they must have."""

    label: list[Annotated[str, StringConstraints(pattern=LABEL_FILTER)]] = Field(
        default_factory=list,
        max_length=16,
        description="key=value, or key for any value (repeatable: all must match)",
    )


PageQuery = Annotated[PageParams, Query()]
PAGED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "a page, oldest first; a later one's URL is in `Link: <...>; "
        'rel="next"` and its cursor in `X-Next-Cursor`, absent on the last page'
    }
}


def require_leader(request: Request) -> None:
    """503 ``not_leader`` on a standby coordinator, naming the leader: for what runs in
    the coordinator's own process (``leadership.py``). An app whose lifespan has not
    run (no leadership) runs nothing of the kind either, and lets it through."""
    leadership: Leadership | None = request.app.state.leadership
    if leadership is None or leadership.leading:
        return
    lease = current_lease(request.app.state.sessions)
    url = lease.leader_url if lease is not None else None
    raise StandbyError(f"{request.method} {request.url.path}", url)


LeaderOnly = Depends(require_leader)
STANDBY_RESPONSE: dict[int | str, dict[str, Any]] = {
    503: {"description": "a standby coordinator: the leader does this (its URL is named)"}
}


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail=detail, headers={"WWW-Authenticate": "Bearer"}
    )


NO_TOKEN = "a bearer token is required"
BAD_TOKEN = "the token is not valid"


def get_token(
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    if bearer is None or not bearer.credentials.strip():
        raise _unauthorized(NO_TOKEN)
    return bearer.credentials.strip()


TokenDep = Annotated[str, Depends(get_token)]


def _heartbeat_owner(session: Session, credentials: AgentCredentials, token: str) -> str | None:
    """The registered agent whose heartbeat token ``token`` is, by name."""
    rows = session.execute(select(Agent.name, Agent.credentials_generation))
    return credentials.heartbeat_owner(token, [(name, generation) for name, generation in rows])


def role_of(
    token: str,
    settings: ServerSettings,
    credentials: AgentCredentials,
    sessions: sessionmaker[Session],
) -> Role | None:
    """Whose ``token`` is (a user's, or a registered agent's heartbeat token), or None."""
    if token_rule.matches(token, settings.user_digests):
        return Role.USER
    with sessions() as session:
        if _heartbeat_owner(session, credentials, token) is not None:
            return Role.AGENT
    return None


def token_problem(
    headers: Headers,
    settings: ServerSettings,
    credentials: AgentCredentials,
    sessions: sessionmaker[Session],
) -> str | None:
    """Why ``headers`` do not authenticate (the 401's detail), or None: what
    :func:`get_role` checks, from the headers alone, so the app's boundary checks it
    before a body is read (``reservoir.common.http_boundary``)."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return NO_TOKEN
    return BAD_TOKEN if role_of(token.strip(), settings, credentials, sessions) is None else None


def get_role(
    request: Request, settings: SettingsDep, credentials: CredentialsDep, token: TokenDep
) -> Role:
    role = role_of(token, settings, credentials, request.app.state.sessions)
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


def require_agent(
    agent_id: Annotated[str, Path(description="agent id", max_length=36)],
    settings: SettingsDep,
    session: SessionDep,
    credentials: CredentialsDep,
    token: TokenDep,
) -> None:
    """The token is the heartbeat token of agent ``agent_id``."""
    if token_rule.matches(token, settings.user_digests):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "heartbeats need an agent's token")
    agent = session.get(Agent, agent_id)
    if agent is not None and credentials.is_heartbeat_token(
        agent.name, token, agent.credentials_generation
    ):
        return
    owner = _heartbeat_owner(session, credentials, token)
    if owner is None:
        raise _unauthorized(BAD_TOKEN)
    if agent is None:
        raise NotFoundError("agent", agent_id)
    raise HTTPException(
        status.HTTP_403_FORBIDDEN,
        f"this is agent {owner!r}'s token: an agent may only send its own heartbeats",
    )


def heartbeat_sender(
    settings: SettingsDep, session: SessionDep, credentials: CredentialsDep, token: TokenDep
) -> str:
    """The name of the registered agent whose heartbeat token this is."""
    if token_rule.matches(token, settings.user_digests):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "heartbeats need an agent's token")
    owner = _heartbeat_owner(session, credentials, token)
    if owner is None:
        raise _unauthorized(BAD_TOKEN)
    return owner


UserAuth = Depends(require_user)
AgentAuth = Depends(require_agent)
HeartbeatSender = Annotated[str, Depends(heartbeat_sender)]


def _error(description: str) -> dict[str, Any]:
    """An error answer of the OpenAPI document; its body, a ``Problem``, is added to
    every error answer by ``reservoir.common.http_boundary``."""
    return {"description": description}


AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: _error("no bearer token, or not a valid one (WWW-Authenticate: Bearer)"),
    403: _error("a valid token of the wrong kind (user vs agent), or of another agent"),
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: _error("no such id; the message names it")}
CONFLICT = "the request conflicts with the current state; the message says why"
