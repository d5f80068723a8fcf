"""The asyncio initiator against real targets: our builtin target and tgt."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import logging
import os
import random
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvloop

from reservoir.agent.initiator import (
    CommandTimeout,
    LoginError,
    RecoveryPolicy,
    Session,
    TcpTransport,
    discover,
)
from reservoir.agent.initiator._transport import IPPROTO_MPTCP, mptcp_connect
from reservoir.agent.iscsi import pdu as P
from reservoir.lab.peers import ReservoirTarget, Tgtd

pytestmark = pytest.mark.integration

ME = "iqn.2026-11.org.reservoir:initiator-test"
LUN_BYTES = 64 << 20
CHUNK = 256 << 10
BLOCK = 512
CHAP_USER = ("user", "secret123456")
CHAP_TARGET = ("tuser", "tsecret123456")


def make_lun(path: Path) -> Path:
    with open(path, "wb") as f:
        f.truncate(LUN_BYTES)
    return path


@pytest.fixture
def ours(tmp_path: Path) -> Iterator[ReservoirTarget]:
    lun = make_lun(tmp_path / "ours.img")
    log = tmp_path / "ours.log"
    with ReservoirTarget(
        [lun], log_path=log, extra=["--nop-interval", "0"], open_access=True
    ) as target:
        yield target


def chunks(seed: int) -> list[tuple[int, bytes]]:
    """32 random 256 KiB chunks (8 MiB) at distinct random offsets of the LUN."""
    rng = random.Random(seed)
    slots = rng.sample(range(LUN_BYTES // CHUNK), 32)
    return [(slot * CHUNK, os.urandom(CHUNK)) for slot in slots]


def digest(parts: list[bytes]) -> str:
    return hashlib.sha256(b"".join(parts)).hexdigest()


async def write_all(session: Session, lun: int, work: list[tuple[int, bytes]]) -> None:
    """All writes at once: 32 commands in flight."""
    await asyncio.gather(*(session.write(lun, off // BLOCK, data) for off, data in work))


async def read_all(session: Session, lun: int, work: list[tuple[int, bytes]]) -> list[bytes]:
    return list(
        await asyncio.gather(*(session.read(lun, off // BLOCK, CHUNK // BLOCK) for off, _ in work))
    )


async def round_trip(
    host: str,
    port: int,
    iqn: str,
    lun: int,
    work: list[tuple[int, bytes]],
    *,
    digests: bool = False,
) -> None:
    session = await Session.open(
        host, port, iqn, initiator_name=ME, header_digest=digests, data_digest=digests
    )
    async with session:
        assert session.params.header_digest == session.params.data_digest == digests
        assert await session.capacity(lun) == (LUN_BYTES // BLOCK, BLOCK)
        await write_all(session, lun, work)
        back = await read_all(session, lun, work)
        assert len(session.tcp_info()) > 0
    assert digest(back) == digest([data for _, data in work])


def file_digest(path: Path, work: list[tuple[int, bytes]]) -> str:
    with open(path, "rb") as f:
        return digest([os.pread(f.fileno(), CHUNK, off) for off, _ in work])


def test_round_trip_against_our_target(ours: ReservoirTarget) -> None:
    asyncio.run(round_trip(ours.host, ours.port, ours.iqn, 0, chunks(1)))


def test_round_trip_with_digests_against_our_target(ours: ReservoirTarget) -> None:
    work = chunks(2)
    asyncio.run(round_trip(ours.host, ours.port, ours.iqn, 0, work, digests=True))


class OpenFile:
    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def fileno(self) -> int:
        return self.fd


async def write_spans(
    host: str, port: int, iqn: str, lun: int, source: Path, *, digests: bool
) -> list[bytes]:
    """Writes the 32 chunks of ``source`` (laid out as on the LUN) from FileSpans of it,
    all at once; reads them back."""
    work = [(off, b"") for off in range(0, 32 * CHUNK, CHUNK)]
    opened = OpenFile(source)
    session = await Session.open(
        host, port, iqn, initiator_name=ME, header_digest=digests, data_digest=digests
    )
    try:
        async with session:
            assert session.sends_spans is not digests  # a data digest needs the bytes
            await asyncio.gather(
                *(
                    session.write(lun, off // BLOCK, P.FileSpan(opened, off, CHUNK))
                    for off, _ in work
                )
            )
            return await read_all(session, lun, work)
    finally:
        os.close(opened.fd)


@pytest.mark.parametrize("digests", [False, True], ids=["sendfile", "data-digest"])
def test_writes_from_file_spans_arrive_whole(
    ours: ReservoirTarget, tmp_path: Path, digests: bool
) -> None:
    source = tmp_path / "source.img"
    source.write_bytes(os.urandom(32 * CHUNK))
    back = asyncio.run(write_spans(ours.host, ours.port, ours.iqn, 0, source, digests=digests))
    assert b"".join(back) == source.read_bytes()


def test_a_write_from_a_span_its_file_cannot_give_fails_and_the_session_goes_on(
    ours: ReservoirTarget, tmp_path: Path
) -> None:
    """The span ends past its file (it shrank): that write fails with SpanError at
    once (the connection it broke is reinstated, not the write reissued), and the
    session carries the next commands."""
    source = tmp_path / "source.img"
    source.write_bytes(os.urandom(CHUNK))
    opened = OpenFile(source)

    async def run() -> tuple[P.SpanError, bytes]:
        session = await Session.open(ours.host, ours.port, ours.iqn, initiator_name=ME)
        async with session:
            with pytest.raises(P.SpanError) as failed:
                await session.write(0, 0, P.FileSpan(opened, 0, 2 * CHUNK))
            await session.write(0, 0, P.FileSpan(opened, 0, CHUNK))
            return failed.value, await session.read(0, 0, CHUNK // BLOCK)

    try:
        error, back = asyncio.run(asyncio.wait_for(run(), 20))
    finally:
        os.close(opened.fd)
    assert f"the file ends before byte {2 * CHUNK}" in str(error)
    assert back == source.read_bytes()


def test_writes_from_file_spans_into_tgt(tmp_path: Path) -> None:
    """tgt parses what sendfile sent: the PDU framing is not only ours."""
    source = tmp_path / "source.img"
    source.write_bytes(os.urandom(32 * CHUNK))
    backing = make_lun(tmp_path / "tgt.img")
    with Tgtd(backing) as tgt:
        back = asyncio.run(write_spans(tgt.host, tgt.port, tgt.iqn, 1, source, digests=False))
    assert b"".join(back) == source.read_bytes()
    assert backing.read_bytes()[: 32 * CHUNK] == source.read_bytes()


def test_round_trip_against_tgt(tmp_path: Path) -> None:
    backing = make_lun(tmp_path / "tgt.img")
    with Tgtd(backing) as tgt:
        work = chunks(3)
        asyncio.run(round_trip(tgt.host, tgt.port, tgt.iqn, 1, work))
    assert file_digest(backing, work) == digest([data for _, data in work])


@pytest.fixture
def chap_target(tmp_path: Path) -> Iterator[ReservoirTarget]:
    lun = make_lun(tmp_path / "chap.img")
    extra = ["--chap", ":".join(CHAP_USER), "--mutual-chap", ":".join(CHAP_TARGET)]
    with ReservoirTarget([lun], log_path=tmp_path / "chap.log", extra=extra) as target:
        yield target


def test_chap_one_way_and_mutual(chap_target: ReservoirTarget) -> None:
    async def main() -> None:
        t = chap_target
        async with await Session.open(
            t.host, t.port, t.iqn, initiator_name=ME, chap=CHAP_USER
        ) as s:
            assert await s.capacity(0) == (LUN_BYTES // BLOCK, BLOCK)
        async with await Session.open(
            t.host, t.port, t.iqn, initiator_name=ME, chap=CHAP_USER, mutual_chap=CHAP_TARGET
        ) as s:
            await s.ping()

    asyncio.run(main())


def test_chap_wrong_secret_is_refused(chap_target: ReservoirTarget) -> None:
    async def main() -> None:
        t = chap_target
        with pytest.raises(LoginError, match="authentication failed") as info:
            await Session.open(t.host, t.port, t.iqn, initiator_name=ME, chap=("user", "x" * 12))
        assert info.value.status == 0x0201
        assert (info.value.status_class, info.value.status_detail) == (2, 1)

    asyncio.run(main())


def test_discovery_lists_every_portal(tmp_path: Path) -> None:
    lun = make_lun(tmp_path / "disc.img")
    with ReservoirTarget([lun], portals=2, open_access=True) as target:
        found = asyncio.run(discover(target.host, target.port, initiator_name=ME))
    assert [t.name for t in found] == [target.iqn]
    assert sorted((p.address, p.port) for p in found[0].portals) == sorted(
        (target.host, port) for port in target.ports
    )


def test_dropped_connection_recovers_with_data_intact(ours: ReservoirTarget) -> None:
    async def main() -> None:
        work = chunks(7)
        recovery = RecoveryPolicy(attempts=5, first_delay=0.05)
        session = await Session.open(
            ours.host, ours.port, ours.iqn, initiator_name=ME, recovery=recovery
        )
        async with session:
            first, rest = work[:4], work[4:]
            await asyncio.gather(*(session.write(0, off // BLOCK, data) for off, data in first))
            assert isinstance(session.transport, TcpTransport)
            session.transport.drop()  # the seam: lose the connection mid-transfer
            await asyncio.gather(*(session.write(0, off // BLOCK, data) for off, data in rest))
            assert session.reinstatements == 1
            back = await read_all(session, 0, work)
        assert digest(back) == digest([data for _, data in work])

    asyncio.run(main())


def test_what_a_session_learned_of_its_target_is_forgotten_when_it_logs_in_again(
    ours: ReservoirTarget,
) -> None:
    """A reinstated session may have reached another target at the same address: what
    its users learned over the lost login (e.g. that the target is ours) goes."""

    async def main() -> None:
        recovery = RecoveryPolicy(attempts=5, first_delay=0.05)
        session = await Session.open(
            ours.host, ours.port, ours.iqn, initiator_name=ME, recovery=recovery
        )
        async with session:
            session.learned[("hash range", 0)] = True
            await session.capacity(0)
            assert session.learned == {("hash range", 0): True}  # kept while logged in
            assert isinstance(session.transport, TcpTransport)
            session.transport.drop()
            await session.capacity(0)
            assert session.reinstatements == 1
            assert session.learned == {}

    asyncio.run(main())


def test_command_timeout_sends_abort_task(ours: ReservoirTarget) -> None:
    async def main() -> None:
        session = await Session.open(
            ours.host,
            ours.port,
            ours.iqn,
            initiator_name=ME,
            immediate_data=False,
            initial_r2t=True,
        )
        async with session:
            await session.capacity(0)  # past the UNIT ATTENTION of a new nexus
            transport = session.transport
            assert isinstance(transport, TcpTransport)
            aborts: list[P.TaskMgmtRequest] = []

            def lose_data_out(pdu: P.Pdu) -> bool:
                if isinstance(pdu, P.TaskMgmtRequest):
                    aborts.append(pdu)
                return not isinstance(pdu, P.DataOut)

            transport.outgoing_filter = lose_data_out
            with pytest.raises(CommandTimeout) as info:
                await session.scsi(0, write16(0, 8), data_out=bytes(4096), timeout=0.5)
            assert [a.function for a in aborts] == [P.TmfFunction.ABORT_TASK]
            assert aborts[0].ref_task_tag == info.value.itt
            assert info.value.tmf_response == P.TmfResponse.COMPLETE
            transport.outgoing_filter = None
            await session.write(0, 0, b"\x5a" * 4096)
            assert await session.read(0, 0, 8) == b"\x5a" * 4096

    asyncio.run(main())


def write16(lba: int, blocks: int) -> bytes:
    return bytes([0x8A, 0]) + lba.to_bytes(8, "big") + blocks.to_bytes(4, "big") + bytes(2)


def test_local_address_and_tcp_info(ours: ReservoirTarget) -> None:
    async def main() -> None:
        session = await Session.open(
            ours.host, ours.port, ours.iqn, initiator_name=ME, local_address="127.0.0.2"
        )
        async with session:
            transport = session.transport
            assert isinstance(transport, TcpTransport)
            sock = transport.socket()
            assert sock is not None and sock.getsockname()[0] == "127.0.0.2"
            assert len(session.tcp_info()) >= 100  # raw struct tcp_info, not parsed

    asyncio.run(main())


@pytest.mark.parametrize("mptcp", [False, True], ids=["tcp", "mptcp"])
def test_the_sessions_socket_says_its_protocol_under_uvloop(tmp_path: Path, mptcp: bool) -> None:
    """uvloop's own wrapper of the socket says protocol 0: the session's socket (for
    TCP_INFO and caps) is asked of the kernel, so MPTCP telemetry finds its subflows."""
    if mptcp:
        try:
            socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP).close()
        except OSError as exc:
            pytest.skip(f"no MPTCP sockets here: {exc}")
    extra = ["--nop-interval", "0", *(["--mptcp"] if mptcp else [])]
    lun = make_lun(tmp_path / "lun.img")
    with ReservoirTarget([lun], log_path=tmp_path / "t.log", extra=extra, open_access=True) as t:

        async def protocol() -> int:
            connector = mptcp_connect if mptcp else None
            session = await Session.open(
                t.host, t.port, t.iqn, initiator_name=ME, connector=connector
            )
            async with session:
                sock = session.socket()
                assert sock is not None
                return sock.proto

        got = uvloop.run(protocol())
    assert got == (IPPROTO_MPTCP if mptcp else socket.IPPROTO_TCP)


def test_a_command_whose_caller_gave_up_leaves_no_unretrieved_error_when_the_session_fails(
    ours: ReservoirTarget, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        session = await Session.open(ours.host, ours.port, ours.iqn, initiator_name=ME)
        reads = [asyncio.create_task(session.read(0, i * 2048, 2048)) for i in range(16)]
        await asyncio.sleep(0)  # the commands are sent
        for read in reads:
            read.cancel()
        await asyncio.gather(*reads, return_exceptions=True)
        assert session.tasks, "every read completed before its caller gave up"
        session._give_up(OSError("cut by the test"))  # the session fails for good
        await session.close()

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(scenario())
        gc.collect()  # an unretrieved exception is logged when its future is collected
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
