"""``GET /volumes``: what copies on this agent may read and write."""

from __future__ import annotations

from fastapi import APIRouter

from reservoir.agent.control.api.deps import AgentDep, Authorized
from reservoir.agent.control.models import AgentVolumePublic

__all__ = ["router"]

router = APIRouter(tags=["volumes"], dependencies=[Authorized])


@router.get("/volumes")
async def list_volumes(agent: AgentDep) -> list[AgentVolumePublic]:
    """The LUNs of the agent's target and its ``source_volumes``, each with its size and
    device id (``naa.`` + the NAA its LUN reports in VPD 0x83); a configured path that
    is missing is listed with ``error`` saying so."""
    return agent.volumes.describe()
