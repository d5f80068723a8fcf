"""``/iperf``: one-shot iperf3 servers and client runs on this host (``iperf.py``).

``POST /iperf/servers`` answers 201 once the server listens (its port in the body);
``POST /iperf/runs`` answers 202 at once with the run's id: poll ``GET
/iperf/runs/{id}`` until ``state`` is ``completed`` (``result``) or ``failed``
(``error``). The errors of ``iperf.py`` are translated here, once.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, status

from reservoir.agent.control.api.deps import AgentDep, Authorized
from reservoir.agent.control.iperf import (
    BadIperfRequestError,
    IperfManager,
    IperfUnavailableError,
    PortInUseError,
    TooManyIperfError,
    UnknownIperfError,
)
from reservoir.agent.control.models import (
    IperfRunCreate,
    IperfRunPublic,
    IperfServerCreate,
    IperfServerPublic,
)

__all__ = ["router"]

router = APIRouter(prefix="/iperf", tags=["iperf"], dependencies=[Authorized])

ERRORS: dict[int | str, dict[str, Any]] = {
    kind.status_code: {"description": kind.__name__}
    for kind in (
        IperfUnavailableError,
        BadIperfRequestError,
        PortInUseError,
        TooManyIperfError,
        UnknownIperfError,
    )
}


def get_iperf(agent: AgentDep) -> IperfManager:
    return agent.iperf


IperfDep = Annotated[IperfManager, Depends(get_iperf)]


@router.post("/servers", status_code=status.HTTP_201_CREATED, responses=ERRORS)
async def start_server(body: IperfServerCreate, iperf: IperfDep) -> IperfServerPublic:
    return (await iperf.start_server(body)).public()


@router.get("/servers/{server_id}", responses=ERRORS)
async def get_server(server_id: str, iperf: IperfDep) -> IperfServerPublic:
    return iperf.get_server(server_id).public()


@router.delete("/servers/{server_id}", responses=ERRORS)
async def stop_server(server_id: str, iperf: IperfDep) -> IperfServerPublic:
    """Kills the server if it still waits for its test."""
    return (await iperf.stop_server(server_id)).public()


@router.post("/runs", status_code=status.HTTP_202_ACCEPTED, responses=ERRORS)
async def start_run(body: IperfRunCreate, iperf: IperfDep) -> IperfRunPublic:
    return iperf.start_run(body).public()


@router.get("/runs", responses=ERRORS)
async def list_runs(iperf: IperfDep) -> list[IperfRunPublic]:
    return [job.public() for job in iperf.runs.values()]


@router.get("/runs/{run_id}", responses=ERRORS)
async def get_run(run_id: str, iperf: IperfDep) -> IperfRunPublic:
    return iperf.get_run(run_id).public()
