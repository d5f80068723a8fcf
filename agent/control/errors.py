"""The agent's control API errors, each with its HTTP status, answered by one handler
(:func:`install_handlers`, registered in ``main.py``): routes never build HTTP errors
for these.

::

    ControlError                                                          500
     +-- AgentSettingsError       the agent's settings cannot be used (at start)
     +-- UnknownCopyError         no copy has this id (copies.py)        404
     +-- CopyConflictError        the copy's state does not allow this   409
     +-- VolumeRefusedError       a path outside the agent's volumes,    403
     |                            or a read-only one written (volumes.py)
     +-- IperfError               iperf3 servers and runs (iperf.py)     500
          +-- IperfUnavailableError   iperf3 missing, NIC pacing off    503
          +-- BadIperfRequestError    address, NIC or -C not here       422
          +-- PortInUseError          the asked port is taken           409
          +-- TooManyIperfError       MAX_ACTIVE of them are running    429
          +-- UnknownIperfError       no server or run with this id     404
"""

from __future__ import annotations

from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse

from reservoir.common.errors import ReservoirError

__all__ = ["ControlError", "install_handlers"]


class ControlError(ReservoirError):
    """The root of the agent API's errors; ``status_code`` is its HTTP answer."""

    status_code = status.HTTP_500_INTERNAL_SERVER_ERROR


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ControlError)
    return JSONResponse({"detail": str(exc)}, status_code=exc.status_code)


def install_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ControlError, _handle)
