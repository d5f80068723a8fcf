"""The initiator against a scripted fake target: negotiation, Data-Out sequencing,
the CmdSN window, pings, errors and session reinstatement (no sockets)."""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import Callable
from typing import Any

import pytest

from reservoir.agent.initiator import (
    ConnectionLostError,
    LoginError,
    PduSink,
    RecoveryPolicy,
    ScsiError,
    Session,
)
from reservoir.agent.initiator._login import LoginOptions, resolve
from reservoir.agent.initiator._transport import TcpTransport, tcp_connect, with_congestion
from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.serial import sn_le
from reservoir.agent.iscsi.text import encode_text, parse_text

IQN = "iqn.2026-11.org.reservoir:fake"
ME = "iqn.2026-11.org.reservoir:unit"
TARGET_KEYS = {
    "MaxRecvDataSegmentLength": "8192",
    "ImmediateData": "Yes",
    "InitialR2T": "No",
    "MaxBurstLength": "1048576",
    "FirstBurstLength": "65536",
}


class FakeTarget:
    """Answers logins with ``keys``, records every other PDU; tests answer by hand."""

    def __init__(self, keys: dict[str, str], max_window: int = 64) -> None:
        self.keys = keys
        self.window = max_window
        self.sent: list[P.Pdu] = []
        self.transports: list[FakeTransport] = []
        self.login_status = (0, 0)
        self.on_pdu: Callable[[FakeTransport, P.Pdu], None] | None = None
        self.statsn = 0
        self.tsih = 0

    async def connect(self, host: str, port: int, local: str | None, sink: PduSink) -> Any:
        transport = FakeTransport(self, sink)
        self.transports.append(transport)
        return transport

    def answer(self, transport: FakeTransport, pdu: P._TargetPdu) -> None:
        if pdu.itt != P.RESERVED_TAG and not isinstance(pdu, P.R2T):
            pdu.statsn, self.statsn = self.statsn, self.statsn + 1
        pdu.expcmdsn = 1
        pdu.maxcmdsn = self.window
        asyncio.get_running_loop().call_soon(transport.deliver, pdu)

    def login(self, transport: FakeTransport, request: P.LoginRequest) -> None:
        self.tsih += 1
        cls, detail = self.login_status
        answer = P.LoginResponse(
            transit=True,
            csg=1,
            nsg=3,
            isid=request.isid,
            tsih=self.tsih,
            itt=request.itt,
            status_class=cls,
            status_detail=detail,
            data=encode_text(self.keys.items()),
        )
        self.answer(transport, answer)


class FakeTransport:
    def __init__(self, target: FakeTarget, sink: PduSink) -> None:
        self.target, self.sink, self.lost = target, sink, False

    def send(self, pdu: P.Pdu) -> None:
        if self.lost:
            return
        if isinstance(pdu, P.LoginRequest):
            self.target.login(self, pdu)
            return
        self.target.sent.append(pdu)
        if isinstance(pdu, P.LogoutRequest):
            self.target.answer(self, P.LogoutResponse(itt=pdu.itt))
        elif self.target.on_pdu is not None:
            self.target.on_pdu(self, pdu)

    def deliver(self, pdu: P.Pdu) -> None:
        if not self.lost:
            self.sink.pdu_received(pdu)

    def set_digests(self, header: bool, data: bool) -> None:
        pass

    def drop(self) -> None:
        if not self.lost:
            self.lost = True
            asyncio.get_running_loop().call_soon(self.sink.transport_lost, None)

    def close(self) -> None:
        self.lost = True

    def tcp_info(self) -> bytes:
        return b""


async def open_session(target: FakeTarget, *, attention: bool = False, **kw: Any) -> Session:
    """A session logged in to ``target``; without the unit attention a new nexus expects
    (``attention``), so that its first command is the first PDU the target sees."""
    kw.setdefault("recovery", RecoveryPolicy(attempts=3, first_delay=0.001))
    session = await Session.open(
        "fake", 3260, IQN, initiator_name=ME, connector=target.connect, **kw
    )
    session.attention_expected = attention
    return session


def good(target: FakeTarget, transport: FakeTransport, itt: int) -> None:
    target.answer(transport, P.ScsiResponse(itt=itt, status=0))


def auto_good(target: FakeTarget) -> None:
    """Answer every command GOOD at once (writes: as if all data had come)."""

    def on_pdu(transport: FakeTransport, pdu: P.Pdu) -> None:
        if isinstance(pdu, P.ScsiCommand):
            good(target, transport, pdu.itt)

    target.on_pdu = on_pdu


# ---------------------------------------------------------------- negotiation


def test_resolve_applies_min_or_and() -> None:
    offer = LoginOptions(ME, IQN, header_digest=True, first_burst_length=1 << 20)
    answers = {
        "HeaderDigest": "CRC32C",
        "DataDigest": "None",
        "MaxRecvDataSegmentLength": "65536",
        "MaxBurstLength": "524288",
        "FirstBurstLength": "8388608",
        "ImmediateData": "No",
        "InitialR2T": "No",
    }
    params = resolve(offer, answers)
    assert params.header_digest and not params.data_digest
    assert params.target_max_recv_data_segment_length == 65536
    assert params.max_recv_data_segment_length == (1 << 24) - 1
    assert params.max_burst_length == 524288
    assert params.first_burst_length == 524288  # min of offers, never above MaxBurstLength
    assert not params.immediate_data  # AND
    assert not params.initial_r2t  # OR of No, No


def test_resolve_defaults_when_target_is_silent_or_rejects() -> None:
    offer = LoginOptions(ME, IQN, initial_r2t=False)
    params = resolve(offer, {"InitialR2T": "Reject"})
    assert params.target_max_recv_data_segment_length == 8192
    assert params.initial_r2t  # default Yes
    assert params.immediate_data
    assert params.first_burst_length == 65536
    assert params.max_burst_length == 262144


def test_operational_offer_asks_for_big_bursts() -> None:
    keys = dict(LoginOptions(ME, IQN).operational_keys())
    assert keys["ImmediateData"] == "Yes" and keys["InitialR2T"] == "No"
    assert keys["MaxBurstLength"] == keys["FirstBurstLength"] == str((1 << 24) - 1)
    assert keys["MaxRecvDataSegmentLength"] == str((1 << 24) - 1)
    discovery = dict(LoginOptions(ME, None).operational_keys())
    assert "MaxBurstLength" not in discovery


LIO_OFFERS = {"MaxConnections": "1", "DefaultTime2Wait": "2", "DefaultTime2Retain": "20"}


class OfferingTarget(FakeTarget):
    """As LIO does: answers the operational keys with T=0 and offers keys of its own
    the initiator did not send, and goes on with T=0 until each is answered."""

    def __init__(self, keys: dict[str, str]) -> None:
        super().__init__(keys)
        self.requests: list[dict[str, str]] = []

    def login(self, transport: FakeTransport, request: P.LoginRequest) -> None:
        pairs = dict(parse_text(bytes(request.data)))
        self.requests.append(pairs)
        answered = {k for r in self.requests[1:] for k in r}
        done = set(LIO_OFFERS) <= answered
        offer = {} if len(self.requests) > 1 else {**self.keys, **LIO_OFFERS}
        answer = P.LoginResponse(
            transit=done,
            csg=1,
            nsg=3 if done else 0,
            isid=request.isid,
            tsih=1 if done else 0,
            itt=request.itt,
            data=encode_text(offer.items()),
        )
        self.answer(transport, answer)


def test_keys_the_target_offers_are_answered_so_the_login_completes() -> None:
    async def main() -> None:
        target = OfferingTarget(dict(TARGET_KEYS))
        session = await open_session(target)
        await session.close()
        assert target.requests[1] == {
            "MaxConnections": "1",
            "DefaultTime2Wait": "2",
            "DefaultTime2Retain": "20",
        }

    asyncio.run(main())


def test_serial_arithmetic() -> None:
    assert sn_le(5, 5) and sn_le(5, 6) and not sn_le(6, 5)
    assert sn_le(0xFFFFFFFF, 2) and not sn_le(2, 0xFFFFFFFF)


def test_session_uses_target_answers() -> None:
    async def main() -> None:
        target = FakeTarget(TARGET_KEYS)
        auto_good(target)
        async with await open_session(target) as session:
            assert session.params.first_burst_length == 65536
            assert session.params.max_burst_length == 1048576
            assert session.params.target_max_recv_data_segment_length == 8192
            assert session.tsih == 1

    asyncio.run(main())


def test_login_failure_names_the_status() -> None:
    async def main() -> None:
        target = FakeTarget(TARGET_KEYS)
        target.login_status = (2, 1)
        with pytest.raises(LoginError, match="authentication failed") as info:
            await open_session(target)
        assert info.value.status == 0x0201
        target.login_status = (2, 3)
        with pytest.raises(LoginError, match="target not found"):
            await open_session(target)

    asyncio.run(main())


# ---------------------------------------------------------------- writes


def test_write_immediate_unsolicited_then_r2t() -> None:
    """8 KiB immediate, unsolicited Data-Out to 64 KiB, then an R2T for the rest."""

    async def main() -> None:
        target = FakeTarget(TARGET_KEYS)
        session = await open_session(target)
        data = bytes(range(256)) * 800  # 204800 bytes = 400 blocks
        write = asyncio.create_task(session.write(0, 10, data))
        await asyncio.sleep(0)
        cmd, *unsolicited = target.sent
        assert isinstance(cmd, P.ScsiCommand) and cmd.write and cmd.expected_length == len(data)
        assert bytes(cmd.data) == data[:8192]
        assert [p.offset for p in unsolicited if isinstance(p, P.DataOut)] == list(
            range(8192, 65536, 8192)
        )
        check_sequence(unsolicited, P.RESERVED_TAG, data)
        target.sent.clear()
        transport = target.transports[0]
        r2t = P.R2T(itt=cmd.itt, ttt=77, offset=65536, length=len(data) - 65536)
        target.answer(transport, r2t)
        await asyncio.sleep(0.01)
        check_sequence(target.sent, 77, data)
        assert sum(len(p.data) for p in target.sent if isinstance(p, P.DataOut)) == 139264
        good(target, transport, cmd.itt)
        await write
        await session.close()

    asyncio.run(main())


def check_sequence(pdus: list[P.Pdu], ttt: int, data: bytes) -> None:
    """DataSN from 0, contiguous offsets, segments <= 8192, F on the last only."""
    outs = [p for p in pdus if isinstance(p, P.DataOut)]
    assert outs
    for n, pdu in enumerate(outs):
        assert pdu.ttt == ttt and pdu.datasn == n
        assert len(pdu.data) <= 8192
        assert bytes(pdu.data) == data[pdu.offset : pdu.offset + len(pdu.data)]
        assert pdu.final == (n == len(outs) - 1)
    for a, b in itertools.pairwise(outs):
        assert a.offset + len(a.data) == b.offset


def test_write_without_immediate_data_waits_for_r2t() -> None:
    async def main() -> None:
        keys = {**TARGET_KEYS, "InitialR2T": "Yes", "ImmediateData": "No"}
        target = FakeTarget(keys)
        session = await open_session(target)
        write = asyncio.create_task(session.write(0, 0, bytes(16384)))
        await asyncio.sleep(0)
        assert len(target.sent) == 1 and not target.sent[0].data
        itt = target.sent[0].itt
        transport = target.transports[0]
        target.answer(transport, P.R2T(itt=itt, ttt=5, offset=0, length=16384))
        await asyncio.sleep(0.01)
        check_sequence(target.sent[1:], 5, bytes(16384))
        good(target, transport, itt)
        await write
        await session.close()

    asyncio.run(main())


# ---------------------------------------------------------------- reads, window, status


def test_cmdsn_window_holds_commands() -> None:
    async def main() -> None:
        target = FakeTarget(TARGET_KEYS, max_window=2)  # CmdSN 1 and 2 may go
        session = await open_session(target)
        reads = [asyncio.create_task(session.read(0, n, 1)) for n in range(5)]
        await asyncio.sleep(0)
        cmds = [p for p in target.sent if isinstance(p, P.ScsiCommand)]
        assert [c.cmdsn for c in cmds] == [1, 2]
        transport = target.transports[0]
        target.window = 10
        for cmd in cmds:
            data_in = P.DataIn(itt=cmd.itt, has_status=True, data=bytes([cmd.cmdsn]) * 512)
            target.answer(transport, data_in)
        await asyncio.sleep(0.01)
        cmds = [p for p in target.sent if isinstance(p, P.ScsiCommand)]
        assert [c.cmdsn for c in cmds] == [1, 2, 3, 4, 5]
        for cmd in cmds[2:]:
            target.answer(transport, P.DataIn(itt=cmd.itt, has_status=True, data=bytes(512)))
        assert [len(r) for r in await asyncio.gather(*reads)] == [512] * 5
        assert reads[1].result() == b"\x02" * 512
        await session.close()

    asyncio.run(main())


def test_read_assembles_data_in_pdus() -> None:
    async def main() -> None:
        target = FakeTarget(TARGET_KEYS)
        session = await open_session(target)
        read = asyncio.create_task(session.read(0, 0, 4))
        await asyncio.sleep(0)
        itt, transport = target.sent[0].itt, target.transports[0]
        for n in range(4):
            pdu = P.DataIn(itt=itt, datasn=n, offset=n * 512, data=bytes([n]) * 512)
            pdu.has_status = n == 3
            target.answer(transport, pdu)
        assert await read == b"".join(bytes([n]) * 512 for n in range(4))
        await session.close()

    asyncio.run(main())


def sense(key: int, asc: int, ascq: int) -> bytes:
    fixed = bytearray(18)
    fixed[0], fixed[2], fixed[7], fixed[12], fixed[13] = 0x70, key, 10, asc, ascq
    return len(fixed).to_bytes(2, "big") + bytes(fixed)


def test_check_condition_raises_and_unit_attention_is_retried() -> None:
    async def main() -> None:
        target = FakeTarget(TARGET_KEYS)
        answers = [sense(6, 0x29, 0), sense(5, 0x21, 0)]

        def on_pdu(transport: FakeTransport, pdu: P.Pdu) -> None:
            if isinstance(pdu, P.ScsiCommand):
                reply = P.ScsiResponse(itt=pdu.itt, status=2, data=answers.pop(0))
                target.answer(transport, reply)

        target.on_pdu = on_pdu
        session = await open_session(target)
        with pytest.raises(ScsiError) as info:
            await session.read(0, 1 << 40, 1)
        assert (info.value.sense_key, info.value.asc, info.value.ascq) == (5, 0x21, 0)
        assert not answers  # the UNIT ATTENTION was retried
        await session.close()

    asyncio.run(main())


def test_a_new_sessions_first_command_goes_behind_a_test_unit_ready_in_one_round_trip() -> None:
    """A target reports POWER ON, RESET to a new nexus's first command: a TEST UNIT READY
    sent just before it takes that, so the command is answered, not sent again."""

    async def main() -> None:
        target = FakeTarget(TARGET_KEYS)
        session = await open_session(target, attention=True)
        read = asyncio.create_task(session.read(0, 0, 1))
        await asyncio.sleep(0)
        tur, command = target.sent  # both out before either is answered
        assert isinstance(tur, P.ScsiCommand) and tur.cdb[:6] == bytes(6)
        assert isinstance(command, P.ScsiCommand) and command.cdb[0] == 0x88  # READ(16)
        assert command.cmdsn == tur.cmdsn + 1
        transport = target.transports[0]
        target.answer(transport, P.ScsiResponse(itt=tur.itt, status=2, data=sense(6, 0x29, 0)))
        data = P.DataIn(itt=command.itt, datasn=0, offset=0, data=b"\x07" * 512)
        data.has_status = True
        target.answer(transport, data)
        assert await read == b"\x07" * 512
        assert len(target.sent) == 2  # nothing sent again
        assert not session.attention_expected
        await session.close()

    asyncio.run(main())


def test_target_nop_in_is_answered_and_ping_works() -> None:
    async def main() -> None:
        target = FakeTarget(TARGET_KEYS)

        def on_pdu(transport: FakeTransport, pdu: P.Pdu) -> None:
            if isinstance(pdu, P.NopOut) and pdu.itt != P.RESERVED_TAG:
                target.answer(transport, P.NopIn(itt=pdu.itt))

        target.on_pdu = on_pdu
        session = await open_session(target)
        await session.ping()
        target.answer(target.transports[0], P.NopIn(ttt=1234, itt=P.RESERVED_TAG))
        await asyncio.sleep(0.01)
        answer = target.sent[-1]
        assert isinstance(answer, P.NopOut) and answer.ttt == 1234
        assert answer.itt == P.RESERVED_TAG and answer.immediate
        await session.close()

    asyncio.run(main())


# ---------------------------------------------------------------- recovery


def test_dropped_connection_reinstates_and_reissues() -> None:
    async def main() -> None:
        target = FakeTarget(TARGET_KEYS)
        session = await open_session(target)
        read = asyncio.create_task(session.read(0, 7, 1))
        await asyncio.sleep(0)
        first = target.sent[-1]
        assert isinstance(first, P.ScsiCommand)
        target.transports[0].drop()
        auto_good(target)
        assert await read == b""  # GOOD without data (the fake sends none)
        assert len(target.transports) == 2 and session.tsih == 2
        again = [p for p in target.sent if isinstance(p, P.ScsiCommand)]
        assert again[-1].cdb == first.cdb and again[-1].itt != first.itt
        assert session.reinstatements == 1
        await session.close()

    asyncio.run(main())


def test_recovery_gives_up_after_bounded_attempts() -> None:
    async def main() -> None:
        target = FakeTarget(TARGET_KEYS)
        session = await open_session(target)
        read = asyncio.create_task(session.read(0, 7, 1))
        await asyncio.sleep(0)
        target.login_status = (3, 1)  # service unavailable: retried, then given up
        target.transports[0].drop()
        with pytest.raises(ConnectionLostError, match="not recovered after 3 attempts"):
            await read
        assert len(target.transports) == 4
        with pytest.raises(ConnectionLostError):
            await session.read(0, 0, 1)
        await session.close()

    asyncio.run(main())


def test_login_keys_sent() -> None:
    async def main() -> None:
        target = FakeTarget(TARGET_KEYS)
        seen: list[dict[str, str]] = []
        login = target.login

        def spy(transport: FakeTransport, request: P.LoginRequest) -> None:
            seen.append(dict(parse_text(bytes(request.data))))
            login(transport, request)

        target.login = spy  # type: ignore[method-assign]
        auto_good(target)
        async with await open_session(target, header_digest=True):
            pass
        assert seen[0]["SessionType"] == "Normal" and seen[0]["TargetName"] == IQN
        assert seen[0]["HeaderDigest"] == "CRC32C,None"

    asyncio.run(main())


def test_nop_interval_pings_and_an_unanswered_ping_reconnects() -> None:
    async def main() -> None:
        target = FakeTarget(TARGET_KEYS)
        answering = True

        def on_pdu(transport: FakeTransport, pdu: P.Pdu) -> None:
            if isinstance(pdu, P.NopOut) and answering:
                target.answer(transport, P.NopIn(itt=pdu.itt))

        target.on_pdu = on_pdu
        async with await open_session(target, nop_interval=0.02) as session:
            await asyncio.sleep(0.1)
            pings = [p for p in target.sent if isinstance(p, P.NopOut)]
            assert len(pings) >= 2 and all(p.immediate for p in pings)
            answering = False
            for _ in range(200):
                await asyncio.sleep(0.01)
                if session.reinstatements:
                    break
            assert session.reinstatements == 1 and len(target.transports) == 2
            answering = True

    asyncio.run(main())


def test_unsolicited_nop_in_does_not_advance_expstatsn() -> None:
    async def main() -> None:
        target = FakeTarget(TARGET_KEYS)
        async with await open_session(target) as session:
            before = session.exp_statsn
            nop = P.NopIn(ttt=9, itt=P.RESERVED_TAG, statsn=before, maxcmdsn=64, expcmdsn=1)
            target.transports[0].deliver(nop)
            assert session.exp_statsn == before

    asyncio.run(main())


def test_a_connection_can_be_switched_to_another_congestion_control() -> None:
    class Sink:
        def pdu_received(self, pdu: object) -> None: ...

        def transport_lost(self, exc: Exception | None) -> None: ...

    async def main() -> tuple[bytes, str]:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport = await with_congestion(tcp_connect, "reno")("127.0.0.1", port, None, Sink())
        assert isinstance(transport, TcpTransport)
        sock = transport.socket()
        assert sock is not None
        name = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0")
        transport.close()
        try:
            await with_congestion(tcp_connect, "no_such_cc")("127.0.0.1", port, None, Sink())
        except OSError as exc:
            error = str(exc)
        server.close()
        await server.wait_closed()
        return name, error

    name, error = asyncio.run(main())
    assert name == b"reno"
    assert "congestion control no_such_cc" in error


# ---------------------------------------------------------------- reuse (warm sessions)


def test_a_session_is_reusable_only_while_idle_and_connected() -> None:
    async def main() -> None:
        target = FakeTarget(TARGET_KEYS)
        session = await open_session(target)
        seen = [session.reusable]  # idle
        read = asyncio.create_task(session.read(0, 7, 1))
        await asyncio.sleep(0)
        seen.append(session.reusable)  # a command outstanding
        command = target.sent[-1]
        assert isinstance(command, P.ScsiCommand)
        good(target, target.transports[0], command.itt)
        await read
        seen.append(session.reusable)  # idle again
        target.transports[0].drop()
        await asyncio.sleep(0)
        seen.append(session.reusable)  # reconnecting
        await session.close()
        seen.append(session.reusable)  # closed
        assert seen == [True, False, True, False, False]

    asyncio.run(main())


def test_reuse_starts_the_counters_afresh_with_the_new_users_recovery() -> None:
    async def main() -> None:
        target = FakeTarget(TARGET_KEYS)
        session = await open_session(target)
        target.transports[0].drop()
        while session.reinstatements == 0:
            await asyncio.sleep(0.001)
        session.reissued_bytes = 4096
        policy = RecoveryPolicy(attempts=12)
        session.reuse(policy)
        assert (session.reinstatements, session.reissued_bytes) == (0, 0)
        assert session.recovery is policy
        await session.close()

    asyncio.run(main())
