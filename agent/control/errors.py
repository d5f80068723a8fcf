"""The agent's control API errors, each with its HTTP status and its problem's code,
answered by one handler (:func:`install_handlers`, registered in ``main.py``) as
problem details (RFC 9457, :mod:`reservoir.common.problems`): routes never build HTTP
errors for these.

::

    ControlError                                                 500 server_error
     +-- AgentSettingsError       the agent's settings cannot be used (at start)
     +-- UnknownCopyError         no copy has this id (copies.py)        404 not_found
     +-- CopyConflictError        the copy's state does not allow this   409 conflict
     +-- VolumeRefusedError       a path outside the agent's volumes,    403 volume_refused
     |                            or a read-only one written (volumes.py)
     +-- IperfError               iperf3 servers and runs (iperf.py)     500 iperf_failed
          +-- IperfUnavailableError   iperf3 missing, NIC pacing off    503 iperf_unavailable
          +-- BadIperfRequestError    address, NIC or -C not here       422 iperf_request_invalid
          +-- PortInUseError          the asked port is taken           409 port_in_use
          +-- TooManyIperfError       MAX_ACTIVE of them are running    429 too_many_requests
          +-- UnknownIperfError       no server or run with this id     404 not_found
"""

from __future__ import annotations

from fastapi import FastAPI, Request, status
from fastapi.responses import Response

from reservoir.common.errors import ReservoirError
from reservoir.common.http_boundary import problem_response

__all__ = ["ControlError", "install_handlers"]


class ControlError(ReservoirError):
    """The root of the agent API's errors; ``status_code`` and ``code`` are its answer."""

    status_code = status.HTTP_500_INTERNAL_SERVER_ERROR
    code = "server_error"


async def _handle(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ControlError)
    return problem_response(request, exc.status_code, str(exc), code=exc.code)


def install_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ControlError, _handle)
