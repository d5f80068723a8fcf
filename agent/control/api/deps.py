"""Dependencies of the routes, as ``Annotated`` aliases so signatures stay short.

Every route but ``/health`` needs ``Authorization: Bearer <token>`` with one of the
configured tokens (compared in constant time; a refusal is 401 with
``WWW-Authenticate: Bearer``). There are no scopes: a valid token may do everything.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status

from reservoir.agent.control.agent import Agent
from reservoir.agent.control.copies import CopyManager

__all__ = ["AgentDep", "Authorized", "ManagerDep", "get_agent", "require_token"]


def get_agent(request: Request) -> Agent:
    agent: Agent = request.app.state.agent
    return agent


AgentDep = Annotated[Agent, Depends(get_agent)]


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail=detail, headers={"WWW-Authenticate": "Bearer"}
    )


def require_token(request: Request, agent: AgentDep) -> None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized("a bearer token is required")
    given = token.strip().encode()
    ok = False
    for wanted in agent.settings.tokens:
        ok |= hmac.compare_digest(given, wanted.get_secret_value().encode())
    if not ok:
        raise _unauthorized("the token is not valid")


Authorized = Depends(require_token)


def get_manager(agent: AgentDep) -> CopyManager:
    return agent.manager


ManagerDep = Annotated[CopyManager, Depends(get_manager)]
