"""Pure Data-Out sequencing and CDB helpers of the initiator (RFC 7143 §11.7, §11.8)."""

from __future__ import annotations

import asyncio

from reservoir.agent.initiator._commands import (
    Task,
    WriteData,
    encode_lun,
    read16,
    solicited_pdus,
    unsolicited_pdus,
    write16,
)
from reservoir.agent.initiator._login import Negotiated
from reservoir.agent.iscsi import pdu as P


def make_task(data: WriteData, read_length: int = 0) -> Task:
    loop = asyncio.new_event_loop()
    try:
        task = Task(0, write16(0, len(data) // 512), data, read_length, loop.create_future())
    finally:
        loop.close()
    task.itt = 42
    return task


def test_unsolicited_from_offset_zero_without_immediate_data() -> None:
    params = Negotiated(
        immediate_data=False,
        initial_r2t=False,
        first_burst_length=20000,
        target_max_recv_data_segment_length=8192,
    )
    task = make_task(bytes(65536))
    assert not task.command_pdu(params, 0).data
    pdus = unsolicited_pdus(task, params, 5)
    assert [(p.offset, len(p.data), p.datasn, p.final) for p in pdus] == [
        (0, 8192, 0, False),
        (8192, 8192, 1, False),
        (16384, 3616, 2, True),
    ]
    assert all(p.ttt == P.RESERVED_TAG and p.expstatsn == 5 for p in pdus)


def test_no_unsolicited_when_immediate_covers_first_burst() -> None:
    params = Negotiated(
        immediate_data=True,
        initial_r2t=False,
        first_burst_length=8192,
        target_max_recv_data_segment_length=65536,
    )
    task = make_task(bytes(32768))
    assert len(task.command_pdu(params, 0).data) == 8192
    assert unsolicited_pdus(task, params, 0) == []


def test_r2t_answer_is_bounded_by_target_segment_length() -> None:
    params = Negotiated(target_max_recv_data_segment_length=4096)
    task = make_task(bytes(range(256)) * 64)  # 16384 bytes
    r2t = P.R2T(itt=42, ttt=9, offset=4096, length=10000)
    pdus = solicited_pdus(task, r2t, params, 0)
    assert [(p.offset, len(p.data), p.datasn, p.final) for p in pdus] == [
        (4096, 4096, 0, False),
        (8192, 4096, 1, False),
        (12288, 1808, 2, True),
    ]
    assert all(p.itt == 42 and p.ttt == 9 for p in pdus)


class Descriptor:
    def fileno(self) -> int:
        return 7


def test_a_write_from_a_file_span_sends_spans_of_it_with_the_same_sequencing() -> None:
    params = Negotiated(
        immediate_data=True,
        initial_r2t=False,
        first_burst_length=20000,
        target_max_recv_data_segment_length=8192,
    )
    source = Descriptor()
    task = make_task(P.FileSpan(source, 1 << 20, 65536))
    command = task.command_pdu(params, 0)
    assert not command.data and command.span == P.FileSpan(source, 1 << 20, 8192)
    assert command.data_length() == 8192 and command.expected_length == 65536
    unsolicited = unsolicited_pdus(task, params, 0)
    r2t = P.R2T(itt=42, ttt=9, offset=20000, length=45536)
    solicited = solicited_pdus(task, r2t, params, 0)
    spans = [(p.offset, p.span) for p in unsolicited + solicited]
    assert all(not p.data for p in unsolicited + solicited)
    assert spans[:2] == [
        (8192, P.FileSpan(source, (1 << 20) + 8192, 8192)),
        (16384, P.FileSpan(source, (1 << 20) + 16384, 3616)),
    ]
    assert spans[2] == (20000, P.FileSpan(source, (1 << 20) + 20000, 8192))
    assert sum(len(s) for _, s in spans if s) + 8192 == 65536


def test_cdbs_and_luns() -> None:
    assert read16(0x0102030405, 7) == bytes.fromhex("88000000000102030405000000070000")
    assert write16(1, 1)[0] == 0x8A
    assert encode_lun(1) == bytes([0, 1]) + bytes(6)
    assert encode_lun(300) == bytes([0x41, 0x2C]) + bytes(6)


def test_read_assembly_keeps_single_pdu_without_copy() -> None:
    task = make_task(b"", read_length=1024)
    task.reset()
    task.data_in(P.DataIn(itt=42, offset=0, data=b"a" * 1024))
    assert task.read_data() == b"a" * 1024
    task.reset()
    task.data_in(P.DataIn(itt=42, offset=512, data=b"b" * 512))
    task.data_in(P.DataIn(itt=42, offset=0, data=b"a" * 512))
    assert task.read_data() == b"a" * 512 + b"b" * 512
