"""``/iperf``: one-shot iperf3 servers and client runs on this host (``iperf.py``).

``POST /iperf/servers`` answers 201 once the server listens (its port in the body);
``POST /iperf/runs`` answers 202 at once with the run's id: poll ``GET
/iperf/runs/{id}`` until ``state`` is ``completed`` (``result``) or ``failed``
(``error``). The errors of ``iperf.py`` are translated here, once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, status

from reservoir.agent.control.api.deps import AgentDep, Authorized
from reservoir.agent.control.iperf import (
    BadIperfRequestError,
    IperfError,
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

STATUS: dict[type[IperfError], int] = {
    IperfUnavailableError: status.HTTP_503_SERVICE_UNAVAILABLE,
    BadIperfRequestError: status.HTTP_422_UNPROCESSABLE_CONTENT,
    PortInUseError: status.HTTP_409_CONFLICT,
    TooManyIperfError: status.HTTP_429_TOO_MANY_REQUESTS,
    UnknownIperfError: status.HTTP_404_NOT_FOUND,
}
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"description": kind.__name__} for kind, code in STATUS.items()
}


def get_iperf(agent: AgentDep) -> IperfManager:
    return agent.iperf


IperfDep = Annotated[IperfManager, Depends(get_iperf)]


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except IperfError as exc:
        code = STATUS.get(type(exc), status.HTTP_500_INTERNAL_SERVER_ERROR)
        raise HTTPException(code, str(exc)) from None


@router.post("/servers", status_code=status.HTTP_201_CREATED, responses=ERRORS)
async def start_server(body: IperfServerCreate, iperf: IperfDep) -> IperfServerPublic:
    with _translated():
        return (await iperf.start_server(body)).public()


@router.get("/servers/{server_id}", responses=ERRORS)
async def get_server(server_id: str, iperf: IperfDep) -> IperfServerPublic:
    with _translated():
        return iperf.get_server(server_id).public()


@router.delete("/servers/{server_id}", responses=ERRORS)
async def stop_server(server_id: str, iperf: IperfDep) -> IperfServerPublic:
    """Kills the server if it still waits for its test."""
    with _translated():
        return (await iperf.stop_server(server_id)).public()


@router.post("/runs", status_code=status.HTTP_202_ACCEPTED, responses=ERRORS)
async def start_run(body: IperfRunCreate, iperf: IperfDep) -> IperfRunPublic:
    with _translated():
        return iperf.start_run(body).public()


@router.get("/runs", responses=ERRORS)
async def list_runs(iperf: IperfDep) -> list[IperfRunPublic]:
    return [job.public() for job in iperf.runs.values()]


@router.get("/runs/{run_id}", responses=ERRORS)
async def get_run(run_id: str, iperf: IperfDep) -> IperfRunPublic:
    with _translated():
        return iperf.get_run(run_id).public()
