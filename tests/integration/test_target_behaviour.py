"""Target behaviour seen from the wire: pings, asynchronous logout, configured targets."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.text import encode_text, parse_text
from reservoir.agent.target.server import IPPROTO_MPTCP
from reservoir.lab.peers import (
    ReservoirTarget,
    free_port,
    reservoir_command,
    stop_process,
    wait_port,
)

from .conftest import IQN, need_tool
from .rawclient import RawClient, encode_lun, write16

pytestmark = pytest.mark.integration


def _pinging_target(tmp_path: Path, lun_file: Path, interval: str) -> ReservoirTarget:
    return ReservoirTarget(
        [lun_file],
        iqn=IQN,
        log_path=tmp_path / "t.log",
        extra=["--nop-interval", interval],
        open_access=True,
    )


def test_target_pings_an_idle_initiator_with_nop_in(tmp_path: Path, lun_file: Path) -> None:
    with (
        _pinging_target(tmp_path, lun_file, "0.3") as target,
        RawClient(target.host, target.port) as c,
    ):
        c.login(IQN)
        ping = c.recv()
        assert isinstance(ping, P.NopIn)
        assert ping.itt == P.RESERVED_TAG and ping.ttt != P.RESERVED_TAG
        c.send(P.NopOut(itt=P.RESERVED_TAG, ttt=ping.ttt, immediate=True, cmdsn=c.cmdsn))
        assert isinstance(c.recv(), P.NopIn)  # the next ping: the connection lives on


def test_silent_initiator_is_disconnected_after_a_ping(tmp_path: Path, lun_file: Path) -> None:
    with (
        _pinging_target(tmp_path, lun_file, "0.3") as target,
        RawClient(target.host, target.port) as c,
    ):
        c.login(IQN)
        started = time.monotonic()
        assert c.closed_by_target()
        assert time.monotonic() - started < 3
    assert "no answer to NOP-In ping" in (tmp_path / "t.log").read_text()


def test_stopping_target_asks_initiators_to_log_out(tmp_path: Path, lun_file: Path) -> None:
    with (
        _pinging_target(tmp_path, lun_file, "0") as target,
        RawClient(target.host, target.port) as c,
    ):
        c.login(IQN)
        assert target.proc is not None
        target.proc.terminate()
        message = c.recv()
        assert isinstance(message, P.AsyncMessage)
        assert message.event == P.AsyncEvent.LOGOUT_REQUEST
        assert c.closed_by_target()
        assert target.proc.wait(10) == 0


def test_configured_targets_each_show_their_luns(tmp_path: Path) -> None:
    need_tool("iscsi-ls")
    config = tmp_path / "t.toml"
    port = free_port()
    disks = []
    for i in range(4):
        disk = tmp_path / f"d{i}.img"
        disk.write_bytes(bytes(1 << 20))
        disks.append(disk)
    run = [*reservoir_command(), "target"]
    steps = [["portal", "add", f"127.0.0.1:{port}"]]
    for t in ("a", "b"):
        iqn = f"iqn.2026-11.org.reservoir:{t}"
        steps.append(["add", iqn, "--open"])
        steps += [["lun", "add", iqn, str(disks.pop())] for _ in range(2)]
    for step in steps:
        subprocess.run(
            [*run, step[0], "--config", str(config), *step[1:]], check=True, capture_output=True
        )
    proc = subprocess.Popen(
        [*run, "serve", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port("127.0.0.1", port, proc=proc)
        out = subprocess.run(
            ["iscsi-ls", "-s", f"iscsi://127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    finally:
        stop_process(proc)
    for t in ("a", "b"):
        block = out.split(f"Target:iqn.2026-11.org.reservoir:{t}")[1].split("Target:")[0]
        assert "Lun:0" in block and "Lun:1" in block


def test_abort_task_ends_a_write_waiting_for_data(target: ReservoirTarget) -> None:
    with RawClient(target.host, target.port) as c:
        c.login(IQN)
        c.clear_unit_attention()
        itt = c.next_itt()
        write = P.ScsiCommand(
            itt=itt,
            cmdsn=c.cmdsn,
            expstatsn=c.expstatsn,
            write=True,
            expected_length=1 << 20,
            cdb=write16(0, 2048),
            lun=encode_lun(0),
        )
        c.cmdsn += 1
        c.send(write)
        assert isinstance(c.recv(), P.R2T)
        tmf = P.TaskMgmtRequest(
            itt=c.next_itt(),
            function=P.TmfFunction.ABORT_TASK,
            ref_task_tag=itt,
            ref_cmdsn=write.cmdsn,
            cmdsn=c.cmdsn,
            immediate=True,
            lun=encode_lun(0),
        )
        c.send(tmf)
        answer = c.recv()
        while isinstance(answer, P.R2T):
            answer = c.recv()
        assert isinstance(answer, P.TaskMgmtResponse)
        assert answer.response == P.TmfResponse.COMPLETE
        ping = c.next_itt()
        c.send(P.NopOut(itt=ping, cmdsn=c.cmdsn, immediate=True, data=b"after"))
        following = c.recv()  # the aborted write gets no SCSI Response: the ping answer is next
        assert isinstance(following, P.NopIn) and following.itt == ping


def test_abort_of_a_write_that_completed_answers_task_does_not_exist(
    target: ReservoirTarget,
) -> None:
    """The write was answered GOOD before the ABORT TASK arrived: the task no longer
    exists (RFC 7143 §11.5.1 b, Function complete, is for a RefCmdSN not received yet),
    which is what libiscsi's AbortTaskSimpleAsync accepts with a GOOD write."""
    with RawClient(target.host, target.port) as c:
        c.login(IQN)
        c.clear_unit_attention()
        written_cmdsn = c.cmdsn
        answer = c.scsi(write16(0, 8), data=bytes(4096), immediate=4096)
        assert answer.status == 0
        written_itt = c.itt  # the task tag scsi() used
        tmf = P.TaskMgmtRequest(
            itt=c.next_itt(),
            function=P.TmfFunction.ABORT_TASK,
            ref_task_tag=written_itt,
            ref_cmdsn=written_cmdsn,
            cmdsn=c.cmdsn,
            immediate=True,
            lun=encode_lun(0),
        )
        c.send(tmf)
        got = c.recv()
        assert isinstance(got, P.TaskMgmtResponse)
        assert got.response == P.TmfResponse.NO_TASK


def test_abort_arriving_with_its_write_leaves_the_lun_usable(target: ReservoirTarget) -> None:
    """The write and its ABORT TASK in one segment: the write is cancelled before it
    ran far, and must still release what it held (a later COMPARE AND WRITE waits
    for every write in flight)."""
    with RawClient(target.host, target.port) as c:
        c.login(IQN)
        c.clear_unit_attention()
        for _ in range(20):
            itt = c.next_itt()
            write = P.ScsiCommand(
                itt=itt,
                cmdsn=c.cmdsn,
                expstatsn=c.expstatsn,
                write=True,
                expected_length=4096,
                cdb=write16(0, 8),
                lun=encode_lun(0),
                data=bytes(4096),
            )
            abort = P.TaskMgmtRequest(
                itt=c.next_itt(),
                function=P.TmfFunction.ABORT_TASK,
                ref_task_tag=itt,
                ref_cmdsn=c.cmdsn,
                cmdsn=c.cmdsn + 1,
                immediate=True,
                lun=encode_lun(0),
            )
            c.cmdsn += 1
            c.send_raw(P.encode_bytes(write) + P.encode_bytes(abort))
            while not isinstance(c.recv(), P.TaskMgmtResponse):
                pass
        caw = bytes([0x89, 0]) + (0).to_bytes(8, "big") + bytes(3) + bytes([1, 0, 0])
        answer = c.scsi(caw, data=bytes(1024), immediate=1024)
        assert answer.status in (0, 2)  # GOOD or MISCOMPARE: an answer, not a hang


def test_sendtargets_lists_every_portal_of_the_target(tmp_path: Path, lun_file: Path) -> None:
    with ReservoirTarget(
        [lun_file], iqn=IQN, portals=3, log_path=tmp_path / "t.log", open_access=True
    ) as target:
        with RawClient(target.host, target.port) as c:
            c.login(None)
            c.send(
                P.TextRequest(
                    itt=c.next_itt(),
                    cmdsn=c.cmdsn,
                    immediate=True,
                    data=encode_text([("SendTargets", "All")]),
                )
            )
            answer = c.recv()
        assert isinstance(answer, P.TextResponse) and answer.final
        pairs = parse_text(bytes(answer.data), allow_duplicates=True)
        assert ("TargetName", IQN) in pairs
        addresses = {value for key, value in pairs if key == "TargetAddress"}
        assert addresses == {f"{target.host}:{port},1" for port in target.ports}


TCP_IS_MPTCP = 43  # getsockopt(SOL_TCP): 1 when the connection really is MPTCP


def _is_mptcp(host: str, port: int) -> int:
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
    except OSError as exc:
        pytest.skip(f"no MPTCP sockets here: {exc}")
    with sock:
        sock.connect((host, port))
        return sock.getsockopt(socket.IPPROTO_TCP, TCP_IS_MPTCP)


@pytest.mark.parametrize("mptcp", [False, True], ids=["tcp-listener", "mptcp-listener"])
def test_mptcp_listener_speaks_mptcp_and_still_serves_tcp(
    tmp_path: Path, lun_file: Path, mptcp: bool
) -> None:
    extra = ["--nop-interval", "0", *(["--mptcp"] if mptcp else [])]
    with ReservoirTarget(
        [lun_file], iqn=IQN, log_path=tmp_path / "t.log", extra=extra, open_access=True
    ) as t:
        assert _is_mptcp(t.host, t.port) == int(mptcp)
        with RawClient(t.host, t.port) as c:  # a plain TCP initiator
            c.login(IQN)
            assert c.nop(b"tcp").data == b"tcp"
