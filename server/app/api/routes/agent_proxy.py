"""``/agents/{id}/info`` and ``/agents/{id}/iperf/...``: an agent's control API, reached
through the coordinator.

Only the coordinator can make the agents' control tokens (derived from its secret key,
``core/agent_credentials.py``), so whoever holds a user's token goes through here to
act on an agent: campaigns on real (registered) networks run their iperf3 baselines (a
one-shot server on one agent, a client run on another, polled until it ends) and read
the agents' CPU time (``cpu_seconds`` of ``/info``) before and after a transfer.

Each request is forwarded to the agent's ``/api/v1/info`` or ``/api/v1/iperf/...`` with
one pooled :class:`HttpAgentClient` of the app (``app.state.agent_proxy``, closed on
shutdown), and the agent's answer comes back as it is. The bodies are forwarded as the
JSON objects they are, not validated here: the agent validates them (``IperfServerCreate``,
``IperfRunCreate`` in ``agent/control/models.py``) and its 422 comes back with its reason.
The coordinator does not import those models because importing
``reservoir.agent.control.models`` runs ``reservoir.agent.control``'s ``__init__``, which
loads the whole agent (iSCSI target, transfer engine, io_uring storage, crc32c, xxhash).

Errors, translated once in :func:`_forwarded` (problems, with these codes)::

    no agent of that id                      404  not_found: "no agent 'x'" (as GET /agents/{id})
    the agent refused (AgentRefusedError)    its status (404, 409, 422, 429, 503) and code,
                                                  "agent NAME: <the agent's detail>"
    the agent refused the coordinator's      502  agent_token_refused (its 401/403: its
      token                                        tokens lack the digest
                                                   ``agent-credentials NAME`` prints)
    unreachable, timed out, 5xx, not JSON    502  agent_unreachable: "agent NAME: no usable
                                                   answer from URL (why)"
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Request, status
from sqlalchemy.orm import Session, sessionmaker

from reservoir.server.app.agent_client import (
    AgentError,
    AgentRef,
    AgentRefusedError,
    AgentTokenRefusedError,
    AgentUnreachableError,
    ForwardedRefusalError,
    HttpAgentClient,
)
from reservoir.server.app.api.deps import AUTH_RESPONSES, NOT_FOUND, UserAuth
from reservoir.server.app.services import agents

__all__ = ["TIMEOUT", "router"]

TIMEOUT = 30.0  # seconds per call to an agent; starting an iperf3 server waits for it
Json = dict[str, Any]

BAD_GATEWAY: dict[int | str, dict[str, Any]] = {
    502: {"description": "the agent did not answer usefully, or refused the coordinator's token"}
}
IPERF_REFUSALS: dict[int | str, dict[str, Any]] = {
    404: {"description": "no such agent, or the agent knows no such server or run"},
    409: {"description": "the agent: the asked port is in use"},
    422: {"description": "the agent refused the request (address, NIC, congestion control)"},
    429: {"description": "the agent runs as many iperf3 servers or runs as it allows"},
    503: {"description": "the agent: iperf3 is not installed, or NIC pacing is off"},
    **BAD_GATEWAY,
}

router = APIRouter(
    prefix="/agents/{agent_id}",
    tags=["agents"],
    responses=AUTH_RESPONSES | NOT_FOUND | BAD_GATEWAY,
    dependencies=[UserAuth],
)

AgentId = Annotated[str, Path(description="agent id", max_length=36)]
JobId = Annotated[
    str, Path(description="the id the agent gave", max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
]


def get_agent(agent_id: AgentId, request: Request) -> AgentRef:
    """The registered agent; the session ends here, before the agent is called."""
    sessions: sessionmaker[Session] = request.app.state.sessions
    with sessions() as session:
        agent = agents.get(session, agent_id)
        return AgentRef(agent.id, agent.name, agent.control_url, agent.credentials_generation)


def get_client(request: Request) -> HttpAgentClient:
    client: HttpAgentClient = request.app.state.agent_proxy
    return client


AgentDep = Annotated[AgentRef, Depends(get_agent)]
ClientDep = Annotated[HttpAgentClient, Depends(get_client)]


@contextmanager
def _forwarded(agent: AgentRef) -> Iterator[None]:
    try:
        yield
    except AgentRefusedError as exc:
        if exc.status in (status.HTTP_401_UNAUTHORIZED, status.HTTP_403_FORBIDDEN):
            raise AgentTokenRefusedError(
                f"agent {agent.name}: it refused the coordinator's token ({exc.status}: "
                f"{exc.answer}); give it the digest `reservoir server agent-credentials "
                f"{agent.name}` prints"
            ) from exc
        raise ForwardedRefusalError(f"agent {agent.name}: {exc.answer}", exc) from exc
    except AgentError as exc:  # AgentUnreachableError
        reason = str(exc).removeprefix(f"agent {agent.name!r}: ")
        raise AgentUnreachableError(
            f"agent {agent.name}: no usable answer from {agent.control_url} ({reason})"
        ) from exc


@router.get("/info", summary="The agent's live /info: version, host, volumes, CPU seconds")
async def agent_info(agent: AgentDep, client: ClientDep) -> Json:
    with _forwarded(agent):
        return await client.info(agent)


SERVER_BODY = Body(
    description="the agent's IperfServerCreate: address (one of its own), port, timeout",
    examples=[{"address": "10.0.1.11", "timeout": 60}],
)
RUN_BODY = Body(
    description=(
        "the agent's IperfRunCreate: host, port, streams, duration, bind, congestion, "
        "fq_rate_bps, nic with nic_pacing_bps"
    ),
    examples=[{"host": "10.0.2.21", "port": 5201, "streams": 4, "duration": 10}],
)


@router.post(
    "/iperf/servers",
    status_code=status.HTTP_201_CREATED,
    summary="Start a one-shot iperf3 server on the agent (answers once it listens)",
    responses=IPERF_REFUSALS,
)
async def start_iperf_server(
    agent: AgentDep, client: ClientDep, body: Annotated[Json, SERVER_BODY]
) -> Json:
    with _forwarded(agent):
        return await client.iperf(agent, "POST", "/servers", body)


@router.get(
    "/iperf/servers/{server_id}", summary="One iperf3 server of the agent", responses=IPERF_REFUSALS
)
async def get_iperf_server(agent: AgentDep, client: ClientDep, server_id: JobId) -> Json:
    with _forwarded(agent):
        return await client.iperf(agent, "GET", f"/servers/{server_id}")


@router.delete(
    "/iperf/servers/{server_id}",
    summary="Stop an iperf3 server of the agent if it still waits for its test",
    responses=IPERF_REFUSALS,
)
async def stop_iperf_server(agent: AgentDep, client: ClientDep, server_id: JobId) -> Json:
    with _forwarded(agent):
        return await client.iperf(agent, "DELETE", f"/servers/{server_id}")


@router.post(
    "/iperf/runs",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Start an iperf3 client run on the agent; poll it until it ends",
    responses=IPERF_REFUSALS,
)
async def start_iperf_run(
    agent: AgentDep, client: ClientDep, body: Annotated[Json, RUN_BODY]
) -> Json:
    with _forwarded(agent):
        return await client.iperf(agent, "POST", "/runs", body)


@router.get(
    "/iperf/runs/{run_id}",
    summary="One iperf3 run of the agent: running, completed (result) or failed (error)",
    responses=IPERF_REFUSALS,
)
async def get_iperf_run(agent: AgentDep, client: ClientDep, run_id: JobId) -> Json:
    with _forwarded(agent):
        return await client.iperf(agent, "GET", f"/runs/{run_id}")
