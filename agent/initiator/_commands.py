"""SCSI commands over iSCSI: CDBs, tasks and the Data-Out sequencing of writes.

RFC 7143 §11.3 (SCSI Command), §11.7 (Data-Out), §11.8 (R2T): a write carries
immediate data up to FirstBurstLength when ImmediateData=Yes, then unsolicited
Data-Out up to FirstBurstLength when InitialR2T=No, then Data-Out as each R2T
asks, every data segment at most the target's MaxRecvDataSegmentLength.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

from reservoir.agent.initiator._login import Negotiated
from reservoir.agent.iscsi import pdu as P
from reservoir.agent.scsi import ALG_XXH3_128, HASH_RANGE_OPCODE

WriteData = bytes | memoryview | P.FileSpan  # a command's data: in memory, or a span of a file
STATUS_GOOD = 0x00
STATUS_CHECK_CONDITION = 0x02


@dataclass(frozen=True, slots=True)
class ScsiReply:
    """The outcome of a SCSI command: status, data read (if any) and sense."""

    status: int
    data: bytes
    sense: bytes


def encode_lun(lun: int) -> bytes:
    """SAM-2 peripheral (LUN < 256) or flat space addressing, 8 bytes."""
    first = lun if lun < 256 else 0x4000 | lun
    return struct.pack(">H", first) + bytes(6)


def read16(lba: int, blocks: int) -> bytes:
    return struct.pack(">BBQIBB", 0x88, 0, lba, blocks, 0, 0)


def write16(lba: int, blocks: int) -> bytes:
    return struct.pack(">BBQIBB", 0x8A, 0, lba, blocks, 0, 0)


def read_capacity16(length: int = 32) -> bytes:
    return struct.pack(">BBQIBB", 0x9E, 0x10, 0, length, 0, 0)


def inquiry(length: int = 96) -> bytes:
    """Standard INQUIRY data (SPC-4 §6.6)."""
    return struct.pack(">BBBHB", 0x12, 0, 0, length, 0)


def report_one_opcode(opcode: int, length: int = 64) -> bytes:
    """REPORT SUPPORTED OPERATION CODES for one opcode (reporting options 001b,
    SPC-4 §6.35): the reply's byte 1 bits 2..0 say whether it is supported."""
    return struct.pack(">BBBBHIBB", 0xA3, 0x0C, 0x01, opcode, 0, length, 0, 0)


def hash_range16(lba: int, blocks: int, algorithm: int = ALG_XXH3_128) -> bytes:
    """HASH RANGE: the target's digest of ``blocks`` blocks at ``lba`` (16 bytes in)."""
    return struct.pack(">BBQIBB", HASH_RANGE_OPCODE, algorithm, lba, blocks, 0, 0)


@dataclass(eq=False, slots=True)
class Task:
    """One command in flight; survives session reinstatement (it is reissued)."""

    lun: int
    cdb: bytes
    data_out: WriteData
    read_length: int
    future: asyncio.Future[ScsiReply]
    itt: int = 0
    cmdsn: int = 0
    buffer: bytearray = field(default_factory=bytearray)
    whole: bytes = b""
    received: int = 0

    def reset(self) -> None:
        """Forget progress (before a reissue on a new connection)."""
        self.buffer = bytearray()
        self.whole = b""
        self.received = 0

    def command_pdu(self, params: Negotiated, expstatsn: int) -> P.ScsiCommand:
        """The SCSI Command PDU, with immediate data when ImmediateData=Yes."""
        immediate = 0
        if self.data_out and params.immediate_data:
            immediate = min(
                len(self.data_out),
                params.first_burst_length,
                params.target_max_recv_data_segment_length,
            )
        data, span = _segment(self.data_out, 0, immediate)
        return P.ScsiCommand(
            itt=self.itt,
            cmdsn=self.cmdsn,
            expstatsn=expstatsn,
            lun=encode_lun(self.lun),
            cdb=self.cdb,
            read=self.read_length > 0,
            write=bool(self.data_out),
            expected_length=self.read_length or len(self.data_out),
            data=data,
            span=span,
        )

    def data_in(self, pdu: P.DataIn) -> None:
        """Place a Data-In segment; a read answered in one PDU is kept without a copy."""
        end = pdu.offset + len(pdu.data)
        if pdu.offset == 0 and end == self.read_length and not self.received:
            self.whole = bytes(pdu.data)
            self.received = end
            return
        if self.whole:
            self.buffer, self.whole = bytearray(self.whole), b""
        if end > len(self.buffer):
            self.buffer.extend(bytes(end - len(self.buffer)))
        self.buffer[pdu.offset : end] = pdu.data
        self.received = max(self.received, end)

    def read_data(self) -> bytes:
        """The data read so far (up to the highest byte received)."""
        if self.whole:
            return self.whole
        return bytes(self.buffer[: self.received])


def data_out_pdus(
    task: Task, ttt: int, offset: int, length: int, *, segment: int, expstatsn: int
) -> list[P.DataOut]:
    """The Data-Out PDUs of one sequence (RFC 7143 §11.7): ``length`` bytes from
    ``offset`` in segments of at most ``segment`` bytes, DataSN from 0, F on the last.
    """
    end = min(offset + length, len(task.data_out))
    lun = encode_lun(task.lun)
    pdus = []
    for datasn, start in enumerate(range(offset, end, segment)):
        stop = min(start + segment, end)
        data, span = _segment(task.data_out, start, stop)
        pdus.append(
            P.DataOut(
                itt=task.itt,
                ttt=ttt,
                lun=lun,
                datasn=datasn,
                offset=start,
                data=data,
                span=span,
                final=stop >= end,
                expstatsn=expstatsn,
            )
        )
    return pdus


def _segment(data: WriteData, start: int, stop: int) -> tuple[memoryview, P.FileSpan | None]:
    """Bytes [start, stop) of a command's data as a PDU's data segment: a view of
    them, or the part of the file span they are in."""
    if isinstance(data, P.FileSpan):
        return memoryview(b""), data[start:stop] if stop > start else None
    return memoryview(data)[start:stop], None


def unsolicited_pdus(task: Task, params: Negotiated, expstatsn: int) -> list[P.DataOut]:
    """Unsolicited Data-Out after the command when InitialR2T=No (RFC 7143 §11.7):
    up to FirstBurstLength counting the immediate data."""
    if not task.data_out or params.initial_r2t:
        return []
    sent = 0
    if params.immediate_data:
        sent = min(len(task.data_out), params.first_burst_length)
        sent = min(sent, params.target_max_recv_data_segment_length)
    burst = min(len(task.data_out), params.first_burst_length)
    if sent >= burst:
        return []
    segment = params.target_max_recv_data_segment_length
    return data_out_pdus(
        task, P.RESERVED_TAG, sent, burst - sent, segment=segment, expstatsn=expstatsn
    )


def solicited_pdus(task: Task, r2t: P.R2T, params: Negotiated, expstatsn: int) -> list[P.DataOut]:
    """The Data-Out PDUs answering one R2T (RFC 7143 §11.8)."""
    segment = params.target_max_recv_data_segment_length
    return data_out_pdus(
        task, r2t.ttt, r2t.offset, r2t.length, segment=segment, expstatsn=expstatsn
    )


def sense_of(response: P.ScsiResponse) -> bytes:
    """The sense data of a SCSI Response (after its 2-byte SenseLength, §11.4.7)."""
    data = bytes(response.data)
    if len(data) < 2:
        return b""
    length = int.from_bytes(data[:2], "big")
    return data[2 : 2 + length]
