"""What a copy says when a remote LUN cannot be reached or used: the side, its
portal, and the cause in words (the integration test covers what a real target and
a refused port answer)."""

from __future__ import annotations

import errno
import socket

import pytest

from reservoir.agent.initiator import ConnectionLostError, LoginError, ScsiError
from reservoir.agent.scsi import build_sense
from reservoir.agent.storage import StorageError
from reservoir.agent.transfer._endpoints import RemoteLun
from reservoir.agent.transfer._reach import may_pass, no_such_lun, reach_failure

WHERE = RemoteLun("10.1.0.2", 3260, "iqn.2026-11.org.example:vol1", 3)
LABEL = "destination LUN 3 of iqn.2026-11.org.example:vol1"


@pytest.mark.parametrize(
    ("exc", "why"),
    [
        (
            socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
            "the host name 10.1.0.2 cannot be resolved (Name or service not known)",
        ),
        (
            ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
            "nothing listens at 10.1.0.2:3260 (connection refused): is the target running there?",
        ),
        (
            TimeoutError(),
            "no answer from 10.1.0.2:3260 in time (a firewall, a wrong address or a route?)",
        ),
        (
            OSError(errno.ENETUNREACH, "Network is unreachable"),
            "10.1.0.2:3260 cannot be reached (Network is unreachable)",
        ),
        (
            LoginError(2, 1),
            "the login at 10.1.0.2:3260 failed: authentication failed (status 0x0201)",
        ),
        (ScsiError(2, build_sense(0x5, 0x25, 0x00)), "the target at 10.1.0.2:3260 has no LUN 3"),
    ],
)
def test_what_kept_a_copy_from_its_lun_is_said_with_the_side_and_portal(
    exc: BaseException, why: str
) -> None:
    assert reach_failure(LABEL, WHERE, exc) == f"{LABEL}: {why}"


def test_an_ipv6_portal_is_bracketed() -> None:
    where = RemoteLun("fd00::2", 3260, "iqn.2026-11.org.example:vol1", 0)
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    assert "nothing listens at [fd00::2]:3260 " in (reach_failure(LABEL, where, refused) or "")


def test_other_errors_are_left_to_the_copy() -> None:
    conflict = ScsiError(0x18, b"")
    invalid = ScsiError(2, build_sense(0x5, 0x24, 0x00))
    assert reach_failure(LABEL, WHERE, conflict) is None
    assert reach_failure(LABEL, WHERE, invalid) is None
    assert reach_failure(LABEL, WHERE, ValueError("a bug")) is None
    assert no_such_lun(ScsiError(2, build_sense(0x5, 0x25, 0x00, descriptor=True)))
    assert not no_such_lun(invalid)


def test_a_disk_s_error_is_not_taken_for_the_network_s() -> None:
    assert reach_failure(LABEL, WHERE, StorageError(errno.EIO, "read failed", "/x")) is None


@pytest.mark.parametrize(
    ("exc", "later"),
    [
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), True),
        (ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"), True),
        (TimeoutError(), True),
        (OSError(errno.EHOSTUNREACH, "No route to host"), True),
        (OSError(errno.ENETUNREACH, "Network is unreachable"), True),
        (ConnectionLostError("session to 10.1.0.2:3260 lost and not recovered"), True),
        (LoginError(3, 1, "service unavailable"), True),  # the target cannot now
        (LoginError(2, 1, "authentication failure"), False),
        (LoginError(2, 3, "target not found"), False),
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), False),
        (OSError(errno.EACCES, "Permission denied"), False),
        (ScsiError(2, build_sense(0x5, 0x25, 0x00)), False),
        (StorageError(errno.EIO, "read failed", "/dev/vdb"), False),
    ],
)
def test_only_a_target_that_could_not_be_reached_may_be_passed_later(
    exc: BaseException, later: bool
) -> None:
    assert may_pass(exc) is later
