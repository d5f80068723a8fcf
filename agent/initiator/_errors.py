"""Exceptions raised by the initiator.

::

    InitiatorError
     +-- LoginError          the target refused the login (status class/detail)
     +-- ConnectionLostError the connection closed or broke under a command
     +-- CommandTimeout      no answer within the command's timeout
     +-- ProtocolError       the target broke RFC 7143 (a PDU we cannot accept)
     +-- ScsiError           a command ended with a SCSI status other than GOOD
"""

from __future__ import annotations

from reservoir.agent.scsi import describe_status
from reservoir.common.errors import ReservoirError

# RFC 7143 §11.13.5: Login Response status class and detail.
LOGIN_STATUS_NAMES: dict[int, str] = {
    0x0101: "target moved temporarily",
    0x0102: "target moved permanently",
    0x0200: "initiator error",
    0x0201: "authentication failed",
    0x0202: "authorization failure",
    0x0203: "target not found",
    0x0204: "target removed",
    0x0205: "unsupported version",
    0x0206: "too many connections",
    0x0207: "missing parameter",
    0x0208: "cannot include connection in session",
    0x0209: "session type not supported",
    0x020A: "session does not exist",
    0x020B: "invalid request during login",
    0x0300: "target error",
    0x0301: "service unavailable",
    0x0302: "out of resources",
}

SENSE_KEY_UNIT_ATTENTION = 0x6


class InitiatorError(ReservoirError):
    """Base class of every initiator error."""


class LoginError(InitiatorError):
    """The target refused the login (status class/detail, RFC 7143 §11.13.5), or the
    login could not complete (``status_class`` 0 then)."""

    def __init__(self, status_class: int, status_detail: int, message: str = "") -> None:
        code = status_class << 8 | status_detail
        name = message or LOGIN_STATUS_NAMES.get(code, "unknown status")
        super().__init__(f"login failed: {name} (status 0x{code:04x})")
        self.status_class = status_class
        self.status_detail = status_detail
        self.status = code


class ConnectionLostError(InitiatorError):
    """The connection dropped and the session could not be recovered."""


class CommandTimeout(InitiatorError):  # noqa: N818 - the name the API promises
    """A command did not complete in time; it was aborted with ABORT TASK.

    ``tmf_response`` is the Task Management response code (RFC 7143 §11.6.1), or
    None when no answer came.
    """

    def __init__(self, itt: int, timeout: float, tmf_response: int | None) -> None:
        super().__init__(
            f"command itt=0x{itt:08x} timed out after {timeout} s "
            f"(ABORT TASK response: {tmf_response})"
        )
        self.itt = itt
        self.tmf_response = tmf_response


class ProtocolError(InitiatorError):
    """The target sent something the initiator cannot accept (Reject, bad PDU)."""


def sense_fields(sense: bytes) -> tuple[int, int, int]:
    """(sense key, ASC, ASCQ) from fixed (0x70/0x71) or descriptor (0x72/0x73) sense."""
    if len(sense) < 4:
        return 0, 0, 0
    if sense[0] & 0x7F in (0x72, 0x73):
        return sense[1] & 0x0F, sense[2], sense[3]
    if len(sense) < 14:
        return sense[2] & 0x0F, 0, 0
    return sense[2] & 0x0F, sense[12], sense[13]


class ScsiError(InitiatorError):
    """A command ended with a status other than GOOD (CHECK CONDITION carries sense)."""

    def __init__(self, status: int, sense: bytes) -> None:
        self.status = status
        self.sense = sense
        self.sense_key, self.asc, self.ascq = sense_fields(sense)
        super().__init__(describe_status(status, (self.sense_key, self.asc, self.ascq)))
