"""``/agents``: registration, heartbeats, listing and removal of agents."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import and_, select

from reservoir.server.app.agent_client import VolumeLister
from reservoir.server.app.api.deps import (
    AUTH_RESPONSES,
    NOT_FOUND,
    PAGED,
    AgentAuth,
    HeartbeatSender,
    LabelledPageParams,
    SessionDep,
    SettingsDep,
    UserAuth,
)
from reservoir.server.app.models import (
    AgentCreate,
    AgentPatch,
    AgentPublic,
    HeartbeatCreate,
)
from reservoir.server.app.services import agent_discovery, agents, labels, pages
from reservoir.server.app.tables import Agent, AgentLabel

__all__ = ["get_volume_lister", "router"]

router = APIRouter(prefix="/agents", tags=["agents"], responses=AUTH_RESPONSES)

AgentId = Annotated[str, Path(description="agent id", max_length=36)]


def get_volume_lister(request: Request) -> VolumeLister:
    """Who asks agents for their volumes (the app's agent client)."""
    lister: VolumeLister = request.app.state.volume_lister
    return lister


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    dependencies=[UserAuth],
    summary="Register an agent with its NICs, volumes (confirmed by the agent) and "
    "capabilities, or with discover, from what the agent reports (its tokens are derived "
    "from its name: `reservoir server agent-credentials NAME`)",
    responses={
        409: {"description": "an agent of that name exists"},
        422: {
            "description": "a volume the agent does not report (or smaller than declared), "
            "or the agent could not be asked (unreachable, or refused its control token)"
        },
    },
)
async def register_agent(
    body: AgentCreate,
    session: SessionDep,
    lister: Annotated[VolumeLister, Depends(get_volume_lister)],
) -> AgentPublic:
    """The agent is asked for its volumes (``GET /volumes`` with its control token) first;
    only the volumes it reports are registered, with the device id it gives them."""
    body = await agent_discovery.discovered(lister, body)
    device_ids = await agents.confirm_volumes(lister, body)
    agent = await run_in_threadpool(agents.create, session, body, device_ids)
    return agents.public(agent)


AgentQuery = Annotated[LabelledPageParams, Query()]


@router.get(
    "",
    dependencies=[UserAuth],
    summary="List the agents (status: what each last said, registered before its first "
    "heartbeat, unreachable once its last heartbeat is older than agent_unreachable_after)",
    responses=PAGED,
)
def list_agents(
    session: SessionDep,
    settings: SettingsDep,
    request: Request,
    response: Response,
    query: AgentQuery,
) -> list[AgentPublic]:
    after = settings.agent_unreachable_after
    chosen = labels.matching(
        select(Agent),
        query.label,
        lambda key: and_(AgentLabel.agent_id == Agent.id, AgentLabel.key == key),
        lambda value: AgentLabel.value == value,
    )
    found = pages.page(
        session, chosen, Agent.registered_at, Agent.id, limit=query.limit, cursor=query.cursor
    )
    pages.link_next(request, response, found.next_cursor)
    return [agents.public(a, after) for a in found.items]


@router.get("/{agent_id}", responses=NOT_FOUND, dependencies=[UserAuth], summary="One agent")
def get_agent(agent_id: AgentId, session: SessionDep, settings: SettingsDep) -> AgentPublic:
    return agents.public(agents.get(session, agent_id), settings.agent_unreachable_after)


@router.patch(
    "/{agent_id}",
    responses=NOT_FOUND,
    dependencies=[UserAuth],
    summary="Change an agent's control URL, NICs' addresses and line rates, capabilities",
)
def update_agent(
    agent_id: AgentId, body: AgentPatch, session: SessionDep, settings: SettingsDep
) -> AgentPublic:
    agent = agents.update(session, agent_id, body)
    return agents.public(agent, settings.agent_unreachable_after)


@router.post(
    "/heartbeat",
    summary="An agent says it is alive; which one, its heartbeat token says (what "
    "`reservoir agent serve` sends with `coordinator` set)",
    responses=NOT_FOUND,
)
def send_heartbeat(
    sender: HeartbeatSender, body: HeartbeatCreate, session: SessionDep
) -> AgentPublic:
    return agents.public(agents.heartbeat_of(session, sender, body))


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
