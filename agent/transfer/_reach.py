"""Why a remote LUN could not be reached or used, in words that name it: the first
commands of a copy go to each remote side's target (log in, probe), and what fails
there is most often a wrong address, port, IQN or LUN number."""

from __future__ import annotations

import errno
import socket
from typing import Protocol

from reservoir.agent.initiator import ConnectionLostError, LoginError, ScsiError
from reservoir.common.errors import ReservoirError

LOGICAL_UNIT_NOT_SUPPORTED = (0x5, 0x25, 0x00)  # ILLEGAL REQUEST
TARGET_ERROR = 3  # login status class: the target cannot now (RFC 7143 11.13.5)


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


def may_pass(exc: BaseException) -> bool:
    """Whether ``exc`` is one a later attempt may get past: the target's host refused,
    timed out or could not be routed to, the session dropped and stayed down, or the
    target answered a login with a target error (out of resources, service
    unavailable). A name that does not resolve, a login refused for what the
    initiator sent (authentication, a target not found) and any SCSI error are not."""
    if isinstance(exc, LoginError):
        return exc.status_class == TARGET_ERROR
    if isinstance(exc, ConnectionLostError | TimeoutError | ConnectionError):
        return True
    unreachable = (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ENETDOWN)
    return isinstance(exc, OSError) and exc.errno in unreachable


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
