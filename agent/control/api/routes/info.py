"""``GET /info``: the agent, its host and the volumes of its builtin target."""

from __future__ import annotations

import dataclasses
import resource

from fastapi import APIRouter

from reservoir import __version__
from reservoir.agent.control import info
from reservoir.agent.control.agent import Agent
from reservoir.agent.control.api.deps import AgentDep, Authorized
from reservoir.agent.control.api.routes.copies import caps_public
from reservoir.agent.control.models import InfoPublic, WarmSessionsPublic
from reservoir.agent.control.nics import host_nics

__all__ = ["router"]

router = APIRouter(tags=["info"], dependencies=[Authorized])


def cpu_seconds() -> float:
    """User + system CPU time of this process: every thread, so the copies (asyncio
    tasks of the agent's loop, their storage I/O in its thread pools) count; child
    processes (iperf3) do not."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def warm_sessions(agent: Agent) -> WarmSessionsPublic | None:
    pool = agent.manager.pool
    if pool is None:
        return None
    return WarmSessionsPublic.model_validate(dataclasses.asdict(pool.stats()))


@router.get("/info")
async def get_info(agent: AgentDep) -> InfoPublic:
    current, available = info.congestion_control()
    return InfoPublic(
        name=agent.settings.name,
        version=__version__,
        storage_backends=info.storage_backends(),
        tcp_congestion_control=current,
        tcp_congestion_control_available=available,
        tcp_slow_start_after_idle=info.slow_start_after_idle(),
        warm_sessions=warm_sessions(agent),
        mptcp=info.mptcp_available(),
        target_portals=agent.portals(),
        nics=await host_nics(),
        volumes=info.volumes(agent.target_config),
        caps_requested={
            job.id: caps_public(job, agent.manager.pacer)
            for job in agent.manager.all()
            if job.caps is not None
        },
        cpu_seconds=cpu_seconds(),
    )
