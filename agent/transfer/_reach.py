"""Why a remote LUN could not be reached or used, in words that name it: the first
commands of a copy go to each remote side's target (log in, probe), and what fails
there is most often a wrong address, port, IQN or LUN number."""

from __future__ import annotations

import socket
from typing import Protocol

from reservoir.agent.initiator import LoginError, ScsiError
from reservoir.common.errors import ReservoirError

LOGICAL_UNIT_NOT_SUPPORTED = (0x5, 0x25, 0x00)  # ILLEGAL REQUEST


class Remote(Protocol):
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def lun(self) -> int: ...


def no_such_lun(exc: BaseException) -> bool:
    """The target has no LUN of the number the command was sent to."""
    return isinstance(exc, ScsiError) and (exc.sense_key, exc.asc, exc.ascq) == (
        LOGICAL_UNIT_NOT_SUPPORTED
    )


def reach_failure(label: str, where: Remote, exc: BaseException) -> str | None:
    """``label`` (``destination LUN 0 of IQN``) and what ``exc`` says of its target at
    ``where``; None for an error that is not about reaching it."""
    portal = f"[{where.host}]:{where.port}" if ":" in where.host else f"{where.host}:{where.port}"
    if isinstance(exc, socket.gaierror):
        why = f"the host name {where.host} cannot be resolved ({exc.strerror})"
    elif isinstance(exc, ConnectionRefusedError):
        why = f"nothing listens at {portal} (connection refused): is the target running there?"
    elif isinstance(exc, TimeoutError):
        why = f"no answer from {portal} in time (a firewall, a wrong address or a route?)"
    elif isinstance(exc, OSError) and not isinstance(exc, ReservoirError):  # not a disk's
        why = f"{portal} cannot be reached ({exc.strerror or exc})"
    elif isinstance(exc, LoginError):
        why = f"the login at {portal} failed: {str(exc).removeprefix('login failed: ')}"
    elif no_such_lun(exc):
        why = f"the target at {portal} has no LUN {where.lun}"
    else:
        return None
    return f"{label}: {why}"
