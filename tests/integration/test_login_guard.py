"""Connections that never finish their login: cut at the login timeout, bounded per
source address and in total, while logged-in sessions keep serving.

The target runs in this process (see :mod:`.inprocess`) with short timeouts; other
source addresses are other loopback addresses (127.0.0.2, 127.0.0.3, ...).
"""

from __future__ import annotations

import logging
import os
import select
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvloop

from reservoir.agent.initiator import Session, discover
from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.text import encode_text
from reservoir.lab.peers import ReservoirTarget

from .conftest import IQN, need_tool
from .inprocess import InProcessTarget, one_lun_config, serving
from .rawclient import INITIATOR, RawClient, read16, write16

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
LONG = 30.0  # a login timeout no test waits for


@pytest.fixture
def log_records(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger="reservoir.target"):
        yield caplog


def _idle(target: InProcessTarget, source: str = HOST) -> socket.socket:
    """A connection that has sent nothing."""
    return socket.create_connection(
        (target.host, target.port), timeout=5, source_address=(source, 0)
    )


def _closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the target closed ``sock`` (EOF or reset), None if it stayed open
    for ``seconds``; whatever the target sends meanwhile is read and dropped."""
    started = time.monotonic()
    deadline = started + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return time.monotonic() - started
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - started
        except TimeoutError:
            return None
    return None


def _login_request(target: str | None = IQN) -> bytes:
    keys = [("InitiatorName", INITIATOR)]
    keys += [("SessionType", "Normal"), ("TargetName", target)] if target else []
    request = P.LoginRequest(
        transit=True, csg=1, nsg=3, isid=bytes([0x80]) + os.urandom(5), itt=1,
        data=encode_text(keys),
    )  # fmt: skip
    return P.encode_bytes(request)


def _session(target: InProcessTarget | ReservoirTarget, source: str = HOST) -> RawClient:
    client = RawClient(target.host, target.port, source=source).connect()
    client.login(IQN)
    client.clear_unit_attention()
    return client


def _does_io(client: RawClient, lba: int) -> None:
    """A WRITE then a READ of the same 4 KiB on a logged-in session."""
    data = os.urandom(4096)
    assert client.scsi(write16(lba, 8), data=data, immediate=len(data)).status == 0
    answer = client.scsi(read16(lba, 8), read=len(data))
    assert answer.status == 0 and answer.data == data


def _pending(target: InProcessTarget, address: str | None = None) -> int:
    """Connections the target holds that are still in their login."""

    def count() -> int:
        held = [c for c in target.server.connections if c.login is not None]
        return sum(1 for c in held if address is None or c.peer.startswith(f"{address}:"))

    return target.call(count)


def _wait_pending(target: InProcessTarget, count: int, address: str | None = None) -> None:
    deadline = time.monotonic() + 5
    while _pending(target, address) != count:
        assert time.monotonic() < deadline, f"still {_pending(target, address)} in login"
        time.sleep(0.01)


# ---------------------------------------------------------------- the login timeout


def test_a_connection_that_sends_nothing_is_closed_after_the_login_timeout(
    lun_file: Path, log_records: pytest.LogCaptureFixture
) -> None:
    with serving(one_lun_config(IQN, lun_file), login_timeout=0.5) as target:
        with _idle(target) as sock:
            port = sock.getsockname()[1]
            elapsed = _closed_within(sock, 5)
        assert elapsed is not None, "the target kept a silent connection for 5 s"
        assert 0.4 <= elapsed < 3
    warnings = [r.getMessage() for r in log_records.records if r.levelno == logging.WARNING]
    said = [m for m in warnings if f"login from {HOST}:{port} not complete after" in m]
    assert said and "login timeout 0.5 s" in said[0], warnings


def test_a_login_sent_one_byte_at_a_time_is_cut_at_the_login_timeout(lun_file: Path) -> None:
    request = _login_request()
    with serving(one_lun_config(IQN, lun_file), login_timeout=0.5) as target:
        with _idle(target) as sock:
            started = time.monotonic()
            sent = 0
            cut_after = None
            while sent < len(request) and time.monotonic() - started < 10:
                try:
                    sock.sendall(request[sent : sent + 1])  # a byte every 50 ms
                except (ConnectionResetError, BrokenPipeError):
                    cut_after = time.monotonic() - started
                    break
                sent += 1
                if select.select([sock], [], [], 0.05)[0]:
                    cut_after = _closed_within(sock, 1)
                    if cut_after is not None:
                        cut_after = time.monotonic() - started
                        break
        assert cut_after is not None, f"the whole {len(request)}-byte login was taken"
        assert sent < len(request)
        assert 0.4 <= cut_after < 3


def test_a_discovery_session_must_end_within_the_login_timeout(lun_file: Path) -> None:
    with (
        serving(one_lun_config(IQN, lun_file), login_timeout=0.5) as target,
        RawClient(target.host, target.port).connect() as client,
    ):
        started = time.monotonic()
        client.login(None)
        assert client.sock is not None
        elapsed = _closed_within(client.sock, 5)
        assert elapsed is not None, "an idle discovery session was kept for 5 s"
        assert time.monotonic() - started < 3


def test_a_session_logged_in_is_not_cut_at_the_login_timeout(lun_file: Path) -> None:
    with (
        serving(one_lun_config(IQN, lun_file), login_timeout=0.3) as target,
        _session(target) as client,
    ):
        assert client.sock is not None
        assert _closed_within(client.sock, 1.0) is None
        _does_io(client, 0)


# ---------------------------------------------------------------- the bounds


def test_the_connection_over_the_per_address_bound_is_closed_at_once(lun_file: Path) -> None:
    config = one_lun_config(IQN, lun_file)
    with (
        serving(config, login_timeout=LONG, max_pending_logins_per_address=3) as target,
        _session(target, "127.0.0.2") as session,  # logged in: not counted
    ):
        _does_io(session, 0)
        waiting = [RawClient(target.host, target.port, source="127.0.0.2") for _ in range(3)]
        for client in waiting:
            client.connect()
        _wait_pending(target, 3, "127.0.0.2")
        _does_io(session, 8)
        with _idle(target, "127.0.0.2") as over:
            over.sendall(_login_request())  # never read: no Login Response, only EOF
            started = time.monotonic()
            elapsed = _closed_within(over, 5)
            assert elapsed is not None and time.monotonic() - started < 1
        _does_io(session, 16)
        with _session(target, "127.0.0.3") as other:  # another address is not bounded
            _does_io(other, 24)
        for client in waiting:  # the three kept waiting can still log in
            client.login(IQN)
            client.clear_unit_attention()
        with _session(target, "127.0.0.2") as fourth:  # past login, they left the count
            _does_io(fourth, 32)
        for client in waiting:
            _does_io(client, 40)
            client.close()
        _does_io(session, 48)


def test_the_connection_over_the_total_bound_is_closed_at_once(lun_file: Path) -> None:
    config = one_lun_config(IQN, lun_file)
    with (
        serving(config, login_timeout=LONG, max_pending_logins=4) as target,
        _session(target) as session,
    ):
        waiting = [_idle(target, f"127.0.0.{2 + i // 2}") for i in range(4)]
        _wait_pending(target, 4)
        _does_io(session, 0)
        for source in ("127.0.0.4", "127.0.0.5", HOST):
            with _idle(target, source) as over:
                over.sendall(_login_request())
                started = time.monotonic()
                assert _closed_within(over, 5) is not None
                assert time.monotonic() - started < 1
            _does_io(session, 8)
        for sock in waiting:
            sock.close()
        _wait_pending(target, 0)
        with _session(target, "127.0.0.4") as later:  # room again once they left
            _does_io(later, 16)
        _does_io(session, 24)


def test_a_flood_over_the_bound_is_logged_a_few_times_not_once_a_connection(
    lun_file: Path, log_records: pytest.LogCaptureFixture
) -> None:
    config = one_lun_config(IQN, lun_file)
    with (
        serving(config, login_timeout=LONG, max_pending_logins_per_address=1) as target,
        _idle(target, "127.0.0.2"),
    ):
        _wait_pending(target, 1, "127.0.0.2")
        for _ in range(50):
            with _idle(target, "127.0.0.2") as over:
                assert _closed_within(over, 5) is not None
    refused = [
        r.getMessage()
        for r in log_records.records
        if r.levelno == logging.WARNING and "refused" in r.getMessage()
    ]
    assert 1 <= len(refused) <= 2, refused
    assert "127.0.0.2" in refused[0]


def test_300_idle_connections_to_a_served_target_keep_only_its_default_bound(
    target: ReservoirTarget, tmp_path: Path
) -> None:
    """``reservoir target serve`` with its defaults: 64 connections in login from one
    address, the other 236 of a flood closed at once, a session served throughout."""
    with _session(target) as session:
        flood = [socket.create_connection((target.host, target.port), 5) for _ in range(300)]
        try:
            closed = _wait_closed(flood, 236, deadline=time.monotonic() + 10)
            assert len(closed) == 236, f"{len(closed)} of 300 closed"
            _does_io(session, 0)
            for sock in flood:  # the 64 kept are still in login: they can finish it
                if sock not in closed:
                    kept = RawClient(target.host, target.port, sock=sock)
                    kept.login(IQN)
                    kept.clear_unit_attention()
        finally:
            for sock in flood:
                sock.close()
        _does_io(session, 8)
    log = (tmp_path / "target.log").read_text()
    assert "refused: 64 connections from 127.0.0.1 already in login" in log


def _wait_closed(socks: list[socket.socket], count: int, deadline: float) -> set[socket.socket]:
    """The sockets the target closed, waited for until ``count`` are or ``deadline``."""
    closed: set[socket.socket] = set()
    while len(closed) < count and (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([s for s in socks if s not in closed], [], [], left)
        for sock in readable:
            try:
                if sock.recv(1):
                    continue  # the target sent something: not a close
            except OSError:
                pass
            closed.add(sock)
    return closed


# ---------------------------------------------------------------- real initiators


def test_our_initiator_logs_in_and_copies_beside_a_full_bound(lun_file: Path) -> None:
    config = one_lun_config(IQN, lun_file)
    options = {"login_timeout": 5.0, "max_pending_logins": 4, "max_pending_logins_per_address": 2}
    with serving(config, **options) as target:
        flood = [_idle(target, "127.0.0.2") for _ in range(2)]
        _wait_pending(target, 2)
        with _idle(target, "127.0.0.2") as over:
            assert _closed_within(over, 5) is not None

        async def use() -> bytes:
            found = await discover(target.host, target.port, initiator_name=INITIATOR)
            assert [t.name for t in found] == [IQN]
            data = os.urandom(1 << 20)
            for _ in range(3):  # one login after the other, each under the bound
                async with await Session.open(
                    target.host, target.port, IQN, initiator_name=INITIATOR
                ) as session:
                    await session.write(0, 0, data)
                    assert await session.read(0, 0, len(data) // 512) == data
            return data

        data = uvloop.run(use())
        for sock in flood:
            sock.close()
    assert lun_file.read_bytes()[: len(data)] == data


def test_libiscsi_logs_in_beside_a_full_bound(lun_file: Path) -> None:
    need_tool("iscsi-ls")
    config = one_lun_config(IQN, lun_file)
    with serving(config, login_timeout=5.0, max_pending_logins_per_address=2) as target:
        flood = [_idle(target, "127.0.0.2") for _ in range(2)]
        _wait_pending(target, 2, "127.0.0.2")
        with _idle(target, "127.0.0.2") as over:
            assert _closed_within(over, 5) is not None
        out = subprocess.run(
            ["iscsi-ls", "-s", f"iscsi://{target.host}:{target.port}"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        for sock in flood:
            sock.close()
    assert IQN in out.stdout and "Lun:0" in out.stdout
