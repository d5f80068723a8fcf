"""Dependencies of the routes, as ``Annotated`` aliases so signatures stay short.

Every route but ``/health`` needs ``Authorization: Bearer <token>`` with one of the
configured tokens: the presented token is hashed and its digest compared in constant
time with every configured digest (:mod:`reservoir.common.tokens`); a refusal is 401
with ``WWW-Authenticate: Bearer``. There are no scopes: a valid token may do everything.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from starlette.datastructures import Headers

from reservoir.agent.control.agent import Agent
from reservoir.agent.control.copies import CopyManager
from reservoir.agent.control.core.config import AgentSettings
from reservoir.common import tokens

__all__ = ["AgentDep", "Authorized", "ManagerDep", "get_agent", "require_token", "token_problem"]


def get_agent(request: Request) -> Agent:
    agent: Agent = request.app.state.agent
    return agent


AgentDep = Annotated[Agent, Depends(get_agent)]


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail=detail, headers={"WWW-Authenticate": "Bearer"}
    )


def token_problem(headers: Headers, settings: AgentSettings) -> str | None:
    """Why ``headers`` do not authenticate (the 401's detail), or None. The app's
    boundary asks this before a body is read (``reservoir.common.http_boundary``)."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return "a bearer token is required"
    digests = [t.get_secret_value() for t in settings.tokens]
    return None if tokens.matches(token.strip(), digests) else "the token is not valid"


def require_token(request: Request, agent: AgentDep) -> None:
    problem = token_problem(request.headers, agent.settings)
    if problem is not None:
        raise _unauthorized(problem)


Authorized = Depends(require_token)


def get_manager(agent: AgentDep) -> CopyManager:
    return agent.manager


ManagerDep = Annotated[CopyManager, Depends(get_manager)]
