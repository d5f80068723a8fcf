"""Bounded fuzzing of the PDU parser and the target's connection state machine.

A real TargetServer (file LUN, real storage engine) gets a logged-in
connection over an in-memory transport; hypothesis then feeds it sequences of
PDUs, well-formed ones with random fields and byte-mutated ones.  Whatever
arrives, nothing may raise out of the connection or its tasks, and a
connection that is still open must still answer a NOP-Out ping.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.receiver import Frame, Receiver
from reservoir.agent.iscsi.text import encode_text
from reservoir.agent.target.config import Lun, Target, TargetConfig
from reservoir.agent.target.connection import Connection
from reservoir.agent.target.server import Portal, TargetServer

pytestmark = pytest.mark.fuzz

IQN = "iqn.2026-11.org.reservoir:fuzz"
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class MemoryTransport:
    def __init__(self) -> None:
        self.out = Receiver()
        self.frames: list[Frame] = []
        self.closing = False

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 3260)

    def writelines(self, parts: list[P.Buffer]) -> None:
        for part in parts:
            self.frames += self.out.feed(part)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pdus(self) -> list[P.Pdu]:
        frames, self.frames = self.frames, []
        return [P.decode(*frame) for frame in frames]


def _cdb(op: int, lba: int, blocks: int) -> bytes:
    return struct.pack(">BBQIBB", op, 0, lba, blocks, 0, 0)


u32 = st.integers(0, 0xFFFFFFFF)
small = st.integers(0, 64)
cdbs = st.one_of(
    st.builds(_cdb, st.sampled_from([0x88, 0x8A, 0x8F, 0x93]), st.integers(0, 1 << 20), small),
    st.binary(min_size=6, max_size=16),
)
pdus = st.one_of(
    st.builds(
        P.ScsiCommand,
        itt=u32,
        cmdsn=st.integers(0, 40),
        read=st.booleans(),
        write=st.booleans(),
        final=st.booleans(),
        expected_length=st.integers(0, 70000),
        cdb=cdbs,
        data=st.binary(max_size=1024),
        attr=st.integers(0, 7),
    ),
    st.builds(
        P.DataOut,
        itt=u32,
        ttt=u32,
        offset=st.integers(0, 70000),
        datasn=small,
        data=st.binary(max_size=1024),
        final=st.booleans(),
    ),
    st.builds(P.NopOut, itt=u32, ttt=u32, cmdsn=st.integers(0, 40), immediate=st.booleans()),
    st.builds(
        P.TaskMgmtRequest,
        function=st.integers(1, 20),
        ref_task_tag=u32,
        cmdsn=st.integers(0, 40),
        immediate=st.booleans(),
    ),
    st.builds(
        P.TextRequest,
        itt=u32,
        ttt=u32,
        data=st.sampled_from(
            [b"SendTargets=All\0", b"SendTargets=\0", b"Bogus=1\0", b"\xff\xfe", b"=\0"]
        ),
    ),
    st.builds(P.SnackRequest, itt=u32),
    st.builds(P.LoginRequest, itt=u32),
    st.builds(P.LogoutRequest, reason=st.integers(0, 3), cid=st.integers(0, 2)),
)


@st.composite
def wire(draw: st.DrawFn) -> bytes:
    """One PDU's bytes, sometimes with a few bytes flipped or cut short."""
    raw = bytearray(P.encode_bytes(draw(pdus)))
    for _ in range(draw(st.integers(0, 2))):
        raw[draw(st.integers(0, len(raw) - 1))] ^= draw(st.integers(1, 255))
    if draw(st.booleans()):
        del raw[draw(st.integers(1, len(raw))) :]
    return bytes(raw)


def _feed(conn: Connection, data: bytes) -> None:
    """What a transport does with received bytes: into the protocol's buffers."""
    view = memoryview(data)
    while view and not conn.closed:
        buf = conn.get_buffer(-1)
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        del buf
        conn.buffer_updated(n)
        view = view[n:]


async def _logged_in(server: TargetServer) -> tuple[Connection, MemoryTransport]:
    conn = Connection(server, Portal("127.0.0.1", 3260))
    transport = MemoryTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    keys = [("InitiatorName", "iqn.2026-11.org.reservoir:fuzzer"), ("TargetName", IQN)]
    keys.append(("SessionType", "Normal"))
    login = P.LoginRequest(transit=True, csg=1, nsg=3, isid=bytes(6), itt=1, data=encode_text(keys))
    _feed(conn, P.encode_bytes(login))
    await asyncio.sleep(0)  # the connection writes once per loop iteration
    answer = transport.pdus()
    assert isinstance(answer[-1], P.LoginResponse) and answer[-1].status_class == 0
    return conn, transport


async def _scenario(lun: Path, chunks: list[bytes]) -> None:
    errors: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, ctx: errors.append(ctx))
    config = TargetConfig(
        portals=[("127.0.0.1", 3260)], targets=[Target(IQN, luns=[Lun(0, str(lun))], open=True)]
    )
    server = TargetServer(config, nop_interval=0)
    for target in config.targets:
        server.luns[target.iqn] = await server._open_luns(target)
    try:
        conn, transport = await _logged_in(server)
        for chunk in chunks:
            _feed(conn, chunk)
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        if not conn.closed:
            await _assert_still_answers(conn, transport)
    finally:
        await server.stop(grace=0)
    assert not errors, errors


async def _assert_still_answers(conn: Connection, transport: MemoryTransport) -> None:
    """When the fuzz input ended on a PDU boundary, a ping must be answered."""
    if conn.rx.pending():
        return  # a cut PDU is waiting for the rest of its bytes: framing is the peer's
    transport.pdus()
    _feed(conn, P.encode_bytes(P.NopOut(itt=0x5EED, immediate=True, data=b"alive")))
    await asyncio.sleep(0)
    if conn.closed:
        return
    assert any(isinstance(p, P.NopIn) and p.itt == 0x5EED for p in transport.pdus())


@FUZZ
@given(chunks=st.lists(wire(), min_size=1, max_size=12))
def test_target_connection_survives_any_pdu_sequence(tmp_path: Path, chunks: list[bytes]) -> None:
    lun = tmp_path / "fuzz.img"
    if not lun.exists():
        with open(lun, "wb") as f:
            f.truncate(1 << 20)
    asyncio.run(_scenario(lun, chunks))


@settings(max_examples=2000, deadline=None)
@given(st.binary(min_size=1, max_size=400), st.booleans(), st.booleans())
def test_receiver_and_decoder_raise_only_pdu_error(blob: bytes, hd: bool, dd: bool) -> None:
    try:
        for frame in Receiver(header_digest=hd, data_digest=dd, max_data=8192).feed(blob):
            P.decode(*frame)
    except P.PduError:
        pass
