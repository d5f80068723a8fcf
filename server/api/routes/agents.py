"""``/agents``: registration, heartbeats, listing and removal of agents."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status

from reservoir.server.api.deps import AUTH_RESPONSES, NOT_FOUND, AgentAuth, SessionDep, UserAuth
from reservoir.server.models import AgentCreate, AgentPublic, HeartbeatCreate
from reservoir.server.services import agents

__all__ = ["router"]

router = APIRouter(prefix="/agents", tags=["agents"], responses=AUTH_RESPONSES)

AgentId = Annotated[str, Path(description="agent id", max_length=36)]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    dependencies=[UserAuth],
    summary="Register an agent with its NICs, volumes and capabilities (its tokens are "
    "derived from its name: `reservoir server agent-credentials NAME`)",
    responses={409: {"description": "an agent of that name exists"}},
)
def register_agent(body: AgentCreate, session: SessionDep) -> AgentPublic:
    return agents.public(agents.create(session, body))


@router.get("", dependencies=[UserAuth], summary="List the agents")
def list_agents(session: SessionDep) -> list[AgentPublic]:
    return [agents.public(a) for a in agents.list_all(session)]


@router.get("/{agent_id}", responses=NOT_FOUND, dependencies=[UserAuth], summary="One agent")
def get_agent(agent_id: AgentId, session: SessionDep) -> AgentPublic:
    return agents.public(agents.get(session, agent_id))


@router.post(
    "/{agent_id}/heartbeat",
    dependencies=[AgentAuth],
    summary="An agent says it is alive (its own heartbeat token)",
    responses=NOT_FOUND,
)
def agent_heartbeat(agent_id: AgentId, body: HeartbeatCreate, session: SessionDep) -> AgentPublic:
    return agents.public(agents.heartbeat(session, agent_id, body))


@router.delete(
    "/{agent_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[UserAuth],
    summary="Remove an agent no volume set or link uses",
    responses=NOT_FOUND | {409: {"description": "still used by a volume set or a link"}},
)
def delete_agent(agent_id: AgentId, session: SessionDep) -> None:
    agents.delete(session, agent_id)
