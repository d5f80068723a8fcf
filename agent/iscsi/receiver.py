"""PDUs read from a socket straight into their own buffers (sans-IO).

The receive half of a connection (the target's and the initiator's), shaped
for :class:`asyncio.BufferedProtocol`: the transport asks
:meth:`Receiver.get_buffer` where the next bytes go, reads into it and says how
many with :meth:`Receiver.received`; :meth:`Receiver.next` then returns whole
PDUs as (bhs, ahs, data). A blocking client does the same with ``recv_into``.

Small PDUs are read in bulk into a staging buffer and split there.  A PDU
whose data segment is large (a write's Data-Out or immediate data) gets a
buffer of its own as soon as its header is in: the kernel copies the rest of
the segment straight into it, and that buffer is the PDU's data.  One copy
from the socket and none in Python, where a bytes-fed framer makes three
(the read's bytes object, the append to its buffer, the slice out of it).

A bad header digest is fatal (framing cannot be trusted); a bad data digest
raises a non-fatal PduError with reason DATA_DIGEST_ERROR after the PDU was
consumed; a data segment over ``max_data`` is fatal.
"""

from __future__ import annotations

from reservoir.agent.buffers import BufferPool
from reservoir.agent.iscsi.digest import DIGEST_LEN, digest
from reservoir.agent.iscsi.pdu import (
    BHS_LEN,
    MAX_DATA_SEGMENT,
    Opcode,
    PduError,
    RejectReason,
    frame_lengths,
    padded,
)

STAGE = 64 << 10  # bytes read at once while PDUs are small
DIRECT_MIN = 8 << 10  # a data segment this long or longer is read into its own buffer
# Opcodes whose data goes on as the PDU's own buffer (write data: a memoryview of a
# page-aligned buffer of the pool); any other PDU read into a buffer of its own is
# handed on as bytes.
_BULK = frozenset({Opcode.DATA_OUT, Opcode.SCSI_COMMAND})

Frame = tuple[bytes, bytes, bytes | memoryview]


class Receiver:
    """Splits received bytes into PDUs, large data segments read in place."""

    def __init__(
        self,
        *,
        max_data: int = MAX_DATA_SEGMENT,
        header_digest: bool = False,
        data_digest: bool = False,
        pool: BufferPool | None = None,
    ) -> None:
        self.pool = pool or BufferPool()
        self.max_data = max_data
        self.header_digest = header_digest
        self.data_digest = data_digest
        self._stage = bytearray(STAGE)
        self._view = memoryview(self._stage)
        self._start = 0  # first byte of the stage not yet returned as a PDU
        self._end = 0  # one past the last byte read into the stage
        self._body: memoryview | None = None  # the large data segment being read
        self._body_view = memoryview(b"")
        self._filled = 0
        self._head: tuple[bytes, bytes, int] = (b"", b"", 0)  # (bhs, ahs, data_len)
        self._head_len = 0  # its bytes on the wire, AHS and digest included

    # ------------------------------------------------------------ the transport's side

    def get_buffer(self) -> memoryview:
        """Where the next bytes from the socket go (never empty)."""
        if self._body is not None:
            return self._body_view[self._filled :]
        if self._start == self._end:
            self._start = self._end = 0
        elif STAGE - self._end < STAGE // 4:
            self._compact()
        return self._view[self._end :]

    def received(self, nbytes: int) -> None:
        """``nbytes`` were written into the last buffer :meth:`get_buffer` gave."""
        if self._body is not None:
            self._filled += nbytes
        else:
            self._end += nbytes

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Every PDU that ``data`` completes, for a caller holding bytes rather than
        reading a socket (a test, a fuzzer): copied in where :meth:`get_buffer` says."""
        frames: list[Frame] = []
        view = memoryview(data).cast("B")
        while view:
            room = self.get_buffer()
            n = min(len(room), len(view))
            room[:n] = view[:n]
            del room
            self.received(n)
            view = view[n:]
            while (frame := self.next()) is not None:
                frames.append(frame)
        return frames

    def pending(self) -> int:
        """Bytes received and not yet returned as a PDU."""
        staged = self._end - self._start
        if self._body is not None:
            return staged + self._head_len + self._filled
        return staged

    def missing(self) -> int:
        """Bytes still to come of the PDU whose header has arrived; 0 when no such
        PDU is under way (the stage is empty, or holds less than a BHS)."""
        if self._body is not None:
            return len(self._body) - self._filled
        avail = self._end - self._start
        if avail < BHS_LEN:
            return 0
        head, body, _ = self._lengths()
        return max(0, head + body - avail)

    def release(self) -> None:
        """The connection is gone: the write data segment under way goes back to the pool."""
        if self._body is not None:
            self.pool.give(self._body)
            self._body, self._body_view, self._filled = None, memoryview(b""), 0

    # ------------------------------------------------------------ the reader's side

    def next(self) -> Frame | None:
        """The next whole PDU as (bhs, ahs, data), or None until more arrives."""
        if self._body is not None:
            return self._finish_body() if self._filled == len(self._body) else None
        avail = self._end - self._start
        if avail < BHS_LEN:
            return None
        if not (self.header_digest or self.data_digest) and (plain := self._plain_staged()):
            return plain
        head, body, data_len = self._lengths()
        if data_len > self.max_data:
            raise PduError(
                f"data segment of {data_len} bytes exceeds {self.max_data}",
                RejectReason.PROTOCOL_ERROR,
                bytes(self._view[self._start : self._start + BHS_LEN]),
                fatal=True,
            )
        if avail >= head + body:
            return self._split_staged(head, data_len)
        if avail >= head and (data_len >= DIRECT_MIN or head + body > STAGE):
            self._begin_body(head, body, data_len)
            return None
        if self._start and self._start + head + body > STAGE:
            self._compact()  # make room for the rest of a small PDU, or a header
        return None

    # ------------------------------------------------------------ inside

    def _plain_staged(self) -> Frame | None:
        """The PDU starting the stage if it is wholly there with no AHS (digests off):
        the common small PDU (a command, a NOP) split in one step, or None for
        :meth:`next`'s general path to decide."""
        view, start = self._view, self._start
        if view[start + 4]:
            return None
        data_len = int.from_bytes(view[start + 5 : start + 8], "big")
        end = start + BHS_LEN + ((data_len + 3) & ~3)
        if end > self._end or data_len > self.max_data:
            return None
        self._start = end
        data = bytes(view[start + BHS_LEN : start + BHS_LEN + data_len]) if data_len else b""
        return bytes(view[start : start + BHS_LEN]), b"", data

    def _lengths(self) -> tuple[int, int, int]:
        """(header bytes with AHS and digest, data bytes with padding and digest, data
        segment length) of the PDU starting the stage."""
        ahs_len, data_len = frame_lengths(self._view[self._start : self._start + BHS_LEN])
        head = BHS_LEN + ahs_len + (DIGEST_LEN if self.header_digest else 0)
        dd = DIGEST_LEN if (self.data_digest and data_len) else 0
        return head, padded(data_len) + dd, data_len

    def _header(self, head: int) -> tuple[bytes, bytes]:
        """(bhs, ahs) of the PDU starting the stage, its header digest checked."""
        view, pos = self._view, self._start
        bhs = bytes(view[pos : pos + BHS_LEN])
        ahs_end = pos + head - (DIGEST_LEN if self.header_digest else 0)
        if self.header_digest and view[ahs_end : pos + head] != digest(view[pos:ahs_end]):
            raise PduError("header digest error", RejectReason.PROTOCOL_ERROR, bhs, fatal=True)
        ahs = bytes(view[pos + BHS_LEN : ahs_end])
        return bhs, ahs

    def _split_staged(self, head: int, data_len: int) -> Frame:
        bhs, ahs = self._header(head)
        view, start = self._view, self._start + head
        pad_end = start + padded(data_len)
        end = pad_end + (DIGEST_LEN if (self.data_digest and data_len) else 0)
        self._start = end
        if data_len and self.data_digest and view[pad_end:end] != digest(view[start:pad_end]):
            raise PduError("data digest error", RejectReason.DATA_DIGEST_ERROR, bhs)
        return bhs, ahs, bytes(view[start : start + data_len]) if data_len else b""

    def _begin_body(self, head: int, body: int, data_len: int) -> None:
        bhs, ahs = self._header(head)
        bulk = bhs[0] & 0x3F in _BULK
        buf = self.pool.take(body) if bulk else memoryview(bytearray(body))
        have = self._end - self._start - head
        buf[:have] = self._view[self._start + head : self._end]
        self._start = self._end = 0
        self._body, self._body_view, self._filled = buf, buf, have
        self._head, self._head_len = (bhs, ahs, data_len), head

    def _finish_body(self) -> Frame:
        buf = self._body
        assert buf is not None
        bhs, ahs, data_len = self._head
        view = self._body_view
        self._body, self._body_view, self._head = None, memoryview(b""), (b"", b"", 0)
        bulk = bhs[0] & 0x3F in _BULK
        if self.data_digest:
            pad_end = padded(data_len)
            if view[pad_end:] != digest(view[:pad_end]):
                self.pool.give(buf)  # write data's goes back (any other is not the pool's)
                raise PduError("data digest error", RejectReason.DATA_DIGEST_ERROR, bhs)
        if len(buf) == data_len and bulk:
            return bhs, ahs, buf  # the usual write data: no padding, no digest
        # The rare padded or digested bulk segment (a part of a buffer could not be
        # given back whole), and any other PDU, are handed on as bytes.
        data = bytes(view[:data_len])
        self.pool.give(buf)  # as above
        return bhs, ahs, data

    def _compact(self) -> None:
        """Move what is pending to the front of the stage."""
        start, end = self._start, self._end
        self._stage[: end - start] = bytes(self._view[start:end])  # the two may overlap
        self._start, self._end = 0, end - start
