"""Several connections per session (MC/S): commands are ordered by CmdSN across them."""

from __future__ import annotations

import socket
import struct

import pytest

from reservoir.agent.iscsi import pdu as P
from reservoir.lab.peers import ReservoirTarget

from .conftest import IQN
from .rawclient import RawClient, encode_lun, read16

pytestmark = pytest.mark.integration

BLOCK = 512


def _join(target: ReservoirTarget, leading: RawClient, cid: int) -> RawClient:
    conn = RawClient(target.host, target.port, isid=leading.isid, tsih=leading.tsih)
    conn.connect()
    conn.cmdsn = leading.cmdsn
    conn.login(IQN, cid=cid)
    return conn


def _write_ordered(conn: RawClient, cmdsn: int, itt: int, lba: int, data: bytes) -> None:
    cdb = struct.pack(">BBIBHB", 0x2A, 0, lba, 0, len(data) // BLOCK, 0)
    conn.send(
        P.ScsiCommand(
            itt=itt,
            cmdsn=cmdsn,
            expstatsn=conn.expstatsn,
            lun=encode_lun(0),
            cdb=cdb,
            write=True,
            expected_length=len(data),
            data=data,
            attr=P.TaskAttr.ORDERED,
        )
    )


def test_four_connections_join_one_session(target: ReservoirTarget) -> None:
    with RawClient(target.host, target.port) as lead:
        answer = lead.login(IQN)
        assert answer.tsih != 0
        others = [_join(target, lead, cid) for cid in (1, 2, 3)]
        try:
            assert {o.tsih for o in others} == {lead.tsih}
            for conn in others:
                assert conn.nop(b"hello").data == b"hello"
        finally:
            for conn in others:
                conn.close()


def test_commands_interleaved_over_four_connections_run_in_cmdsn_order(
    target: ReservoirTarget,
) -> None:
    with RawClient(target.host, target.port) as lead:
        lead.login(IQN)
        lead.clear_unit_attention()
        conns = [lead, *(_join(target, lead, cid) for cid in (1, 2, 3))]
        try:
            base = lead.cmdsn
            patterns = [bytes([0x41 + i]) * BLOCK for i in range(8)]
            # CmdSN base+k goes out on connection k % 4, in reverse CmdSN order:
            # the target must hold them until the gap at `base` is filled.
            for k in reversed(range(1, 8)):
                _write_ordered(conns[k % 4], base + k, 100 + k, 7, patterns[k])
            for conn in conns[1:]:
                conn.sock.settimeout(0.3)  # type: ignore[union-attr]
                with pytest.raises(socket.timeout):
                    conn.recv()
                conn.sock.settimeout(5)  # type: ignore[union-attr]
            _write_ordered(conns[0], base, 100, 7, patterns[0])
            statuses = _responses(conns, {100 + k: k % 4 for k in range(8)})
            assert statuses == {100 + k: 0 for k in range(8)}
            lead.cmdsn = base + 8
            read = lead.scsi(read16(7, 1), read=BLOCK)
            assert read.data == patterns[7], "the write with the highest CmdSN must land last"
        finally:
            for conn in conns[1:]:
                conn.close()


def _responses(conns: list[RawClient], expected: dict[int, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for itt, index in expected.items():
        while itt not in out:
            pdu = conns[index].recv()
            if isinstance(pdu, P.ScsiResponse):
                out[pdu.itt] = pdu.status
    return out
