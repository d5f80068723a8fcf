"""A SCSI task on the target: gathering its Data-Out, executing it, answering.

Write data arrives as immediate data in the command PDU, as unsolicited
Data-Out (when InitialR2T=No, up to FirstBurstLength), and as Data-Out
solicited by R2Ts of at most MaxBurstLength, with at most MaxOutstandingR2T
outstanding (RFC 7143 §3.2.4.2, §11.7, §11.8).  The session negotiates
DataPDUInOrder=Yes and DataSequenceInOrder=Yes, so each sequence is
checked to arrive in order.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reservoir.agent.iscsi import pdu as P
from reservoir.agent.target.errors import TargetError

if TYPE_CHECKING:
    from reservoir.agent.target.connection import Connection
    from reservoir.agent.target.eager import Runner

log = logging.getLogger("reservoir.target")


class DataOutError(TargetError):
    """A Data-Out PDU that does not fit the task.

    ``ascq`` is the qualifier of ASC 0x4B (DATA PHASE ERROR family, SPC-4) the
    command is then ended with, under sense key ABORTED COMMAND.
    """

    def __init__(self, message: str, ascq: int = 0x00) -> None:
        super().__init__(message)
        self.ascq = ascq


INVALID_TTT = 0x01
TOO_MUCH_WRITE_DATA = 0x02
DATA_OFFSET_ERROR = 0x05


@dataclass(eq=False)
class _Sequence:
    """One burst of Data-Out: unsolicited (ttt=RESERVED) or answering an R2T."""

    ttt: int
    next: int
    end: int
    datasn: int = 0


@dataclass(eq=False)
class ScsiTask:
    conn: Connection
    cmd: P.ScsiCommand
    lun: int
    buffer: bytes | memoryview = b""  # the immediate data itself when it is all
    received: int = 0
    r2tsn: int = 0
    runner: Runner | None = None
    aborted: bool = False
    _sequences: dict[int, _Sequence] = field(default_factory=dict)
    _bursts: list[tuple[int, int]] = field(default_factory=list)
    _all_data: asyncio.Future[None] | None = None

    @property
    def itt(self) -> int:
        return self.cmd.itt

    @property
    def expected_out(self) -> int:
        return self.cmd.expected_length if self.cmd.write else 0

    # ------------------------------------------------------------ data-out

    def take_immediate(self, unsolicited_end: int) -> None:
        """Place the command's immediate data and open the unsolicited burst."""
        data = self.cmd.data
        if len(data) == self.expected_out:
            self.buffer = memoryview(data)  # all of it came with the command: no copy
        else:
            # Reused or fresh: every byte of it is written by the Data-Out to come.
            self.buffer = self.conn.server.buffers.take(self.expected_out)
            self.buffer[: len(data)] = data
            self.conn.server.buffers.give(data)  # copied: the PDU's own buffer is free
            self.cmd.data = b""
        self.received = len(data)
        if unsolicited_end > len(data):
            self._sequences[P.RESERVED_TAG] = _Sequence(P.RESERVED_TAG, len(data), unsolicited_end)
        self._plan_bursts(max(unsolicited_end, len(data)))

    def _plan_bursts(self, start: int) -> None:
        burst = self.conn.session_params.max_burst_length
        self._bursts = [
            (off, min(burst, self.expected_out - off))
            for off in range(start, self.expected_out, burst)
        ]

    def on_data_out(self, pdu: P.DataOut) -> None:
        if self.aborted:
            return  # a straggler: the buffer may be back in the pool
        seq = self._sequences.get(pdu.ttt)
        if seq is None:
            raise DataOutError(
                f"Data-Out with unknown TTT {pdu.ttt:#x} for ITT {self.itt:#x}", INVALID_TTT
            )
        length = len(pdu.data)
        if pdu.offset != seq.next or pdu.offset + length > seq.end:
            raise DataOutError(
                f"Data-Out offset {pdu.offset}+{length} outside expected {seq.next}..{seq.end}",
                DATA_OFFSET_ERROR,
            )
        if pdu.datasn != seq.datasn:
            raise DataOutError(f"Data-Out DataSN {pdu.datasn}, expected {seq.datasn}")
        assert isinstance(self.buffer, memoryview)  # more data was expected than came first
        self.buffer[pdu.offset : pdu.offset + length] = pdu.data
        seq.next += length
        seq.datasn += 1
        self.received += length
        if pdu.final or seq.next == seq.end:
            self._end_sequence(seq, pdu.final)

    def _end_sequence(self, seq: _Sequence, final: bool) -> None:
        if seq.next != seq.end or not final:
            raise DataOutError(
                f"Data-Out sequence ended at {seq.next}, expected {seq.end}", DATA_OFFSET_ERROR
            )
        del self._sequences[seq.ttt]
        if seq.ttt != P.RESERVED_TAG:
            self._send_r2ts()
        self._check_complete()

    def _check_complete(self) -> None:
        done = self.received >= self.expected_out and not self._sequences
        if done and self._all_data is not None and not self._all_data.done():
            self._all_data.set_result(None)

    def _send_r2ts(self) -> None:
        limit = self.conn.session_params.max_outstanding_r2t
        solicited = [s for s in self._sequences.values() if s.ttt != P.RESERVED_TAG]
        for _ in range(limit - len(solicited)):
            if not self._bursts:
                return
            offset, length = self._bursts.pop(0)
            ttt = self.conn.new_ttt()
            self._sequences[ttt] = _Sequence(ttt, offset, offset + length)
            self.conn.send_r2t(self, ttt, self.r2tsn, offset, length)
            self.r2tsn += 1

    async def receive_data(self) -> None:
        """Wait until all Data-Out arrived, soliciting it with R2Ts."""
        self._all_data = asyncio.get_running_loop().create_future()
        self._send_r2ts()
        self._check_complete()
        await self._all_data

    # ------------------------------------------------------------ lifecycle

    def abort(self) -> None:
        """Cancel the task; its buffer goes back to the pool now if nothing runs it,
        else when its coroutine ends (storage is done with the buffer by then)."""
        self.aborted = True
        if self.runner is not None and not self.runner.done():
            self.runner.cancel()
        else:
            self.release_buffer()

    def release_buffer(self) -> None:
        """Give the write data buffer back to the pool (once; nothing if not the pool's)."""
        buffer, self.buffer = self.buffer, b""
        self.conn.server.buffers.give(buffer)
