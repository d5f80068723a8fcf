"""The iSCSI PDU codec (RFC 7143 §11): every PDU type, both directions.

A PDU on the wire is a 48-byte Basic Header Segment (BHS), optional
Additional Header Segments (AHS), an optional header digest, a data segment
padded to 4 bytes and an optional data digest.  The BHS is decoded with one
``struct`` call into the common fields plus the eight 32-bit words at bytes
16..47; each PDU class maps those words to its named fields.

Errors: :class:`PduError` carries the Reject reason (RFC 7143 §11.17.1) the
receiver should answer with, and whether the connection can go on.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, Protocol, Self

from reservoir.agent.iscsi._header import Header, compile_header
from reservoir.agent.iscsi.digest import digest
from reservoir.agent.iscsi.errors import IscsiError

BHS_LEN = 48
MAX_DATA_SEGMENT = (1 << 24) - 1
RESERVED_TAG = 0xFFFFFFFF

_BHS = struct.Struct(">BBBBI8s8I")


class Opcode(IntEnum):
    NOP_OUT = 0x00
    SCSI_COMMAND = 0x01
    TASK_MGMT_REQUEST = 0x02
    LOGIN_REQUEST = 0x03
    TEXT_REQUEST = 0x04
    DATA_OUT = 0x05
    LOGOUT_REQUEST = 0x06
    SNACK_REQUEST = 0x10
    NOP_IN = 0x20
    SCSI_RESPONSE = 0x21
    TASK_MGMT_RESPONSE = 0x22
    LOGIN_RESPONSE = 0x23
    TEXT_RESPONSE = 0x24
    DATA_IN = 0x25
    LOGOUT_RESPONSE = 0x26
    R2T = 0x31
    ASYNC_MESSAGE = 0x32
    REJECT = 0x3F


INITIATOR_OPCODES = frozenset(op for op in Opcode if op < 0x20)
IMMEDIATE_ALLOWED = frozenset(
    {
        Opcode.NOP_OUT,
        Opcode.SCSI_COMMAND,
        Opcode.TASK_MGMT_REQUEST,
        Opcode.LOGIN_REQUEST,
        Opcode.TEXT_REQUEST,
        Opcode.LOGOUT_REQUEST,
    }
)


class RejectReason(IntEnum):
    """Reject reasons, RFC 7143 §11.17.1."""

    DATA_DIGEST_ERROR = 0x02
    SNACK_REJECT = 0x03
    PROTOCOL_ERROR = 0x04
    COMMAND_NOT_SUPPORTED = 0x05
    IMMEDIATE_COMMAND_REJECT = 0x06
    TASK_IN_PROGRESS = 0x07
    INVALID_DATA_ACK = 0x08
    INVALID_PDU_FIELD = 0x09
    LONG_OP_REJECT = 0x0A
    DEPRECATED = 0x0B
    WAITING_FOR_LOGOUT = 0x0C


class PduError(IscsiError):
    """A PDU that cannot be accepted.

    ``reason`` is what a Reject should say; ``header`` the offending BHS (the
    Reject's data segment); ``fatal`` means framing is lost and the connection
    must be closed after answering.
    """

    def __init__(
        self, message: str, reason: RejectReason, header: bytes = b"", *, fatal: bool = False
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.header = header
        self.fatal = fatal


# ---------------------------------------------------------------- framing


def frame_lengths(bhs: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(AHS bytes, data segment bytes) announced by a BHS, for the reader."""
    ahs_words = bhs[4]
    data_len = int.from_bytes(bhs[5:8], "big")
    return ahs_words * 4, data_len


def padded(length: int) -> int:
    """``length`` rounded up to a multiple of 4 (the data segment padding)."""
    return (length + 3) & ~3


_PADS = (b"", b"\0\0\0", b"\0\0", b"\0")


def pad_bytes(length: int) -> bytes:
    """The zero bytes that pad a data segment of ``length`` bytes."""
    return _PADS[length & 3]


# ---------------------------------------------------------------- AHS


class AhsType(IntEnum):
    EXTENDED_CDB = 1
    BIDI_READ_LENGTH = 2


def parse_ahs(ahs: bytes, header: bytes = b"") -> list[tuple[int, bytes]]:
    """Split the AHS area into (type, specific bytes); RFC 7143 §11.2.2."""
    out: list[tuple[int, bytes]] = []
    pos = 0
    while pos < len(ahs):
        if len(ahs) - pos < 4:
            raise PduError("truncated AHS", RejectReason.PROTOCOL_ERROR, header, fatal=True)
        length = int.from_bytes(ahs[pos : pos + 2], "big")
        kind = ahs[pos + 2]
        end = pos + 3 + length
        if length == 0 or end > len(ahs):
            raise PduError("AHS length overruns", RejectReason.PROTOCOL_ERROR, header)
        out.append((kind, bytes(ahs[pos + 3 : end])))
        pos = padded(end)
    return out


def build_ahs(kind: int, specific: bytes) -> bytes:
    body = len(specific).to_bytes(2, "big") + bytes([kind]) + specific
    return body + pad_bytes(len(body))


# ---------------------------------------------------------------- base


class SpanSource(Protocol):
    """An open file a data segment can be sent from."""

    def fileno(self) -> int:
        """Its descriptor; -1 once it is closed."""
        ...


@dataclass(frozen=True, slots=True)
class FileSpan:
    """A data segment that stays in a file until the transport sends it: ``length``
    bytes at ``offset`` of ``source``, moved by the kernel from the page cache to the
    socket (sendfile) without passing through process memory.  Only PDUs being sent
    carry one (:attr:`Pdu.span`); decoding never makes one."""

    source: SpanSource
    offset: int
    length: int

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: slice) -> FileSpan:
        start, stop, step = index.indices(self.length)
        if step != 1:
            raise ValueError("a FileSpan slice takes no step")
        return FileSpan(self.source, self.offset + start, max(stop - start, 0))

    def read(self) -> bytes:
        """The span's bytes (for a transport that cannot send from the file);
        :class:`SpanError` when the file is closed or ends before the span does."""
        data = os.pread(self.fileno(), self.length, self.offset)
        if len(data) != self.length:
            raise self.short()
        return data

    def fileno(self) -> int:
        """The file's descriptor; :class:`SpanError` once it is closed."""
        fd = self.source.fileno()
        if fd < 0:
            raise SpanError(errno.EBADF, "the file a data segment is sent from was closed", self)
        return fd

    def short(self) -> SpanError:
        """The error of a span its file ends before."""
        return SpanError(errno.EIO, f"the file ends before byte {self.offset + self.length}", self)

    def available(self) -> bool:
        """Whether the file is open and holds the whole span (a regular file's size
        says; a device is taken to)."""
        fd = self.source.fileno()
        if fd < 0:
            return False
        st = os.fstat(fd)
        return not stat.S_ISREG(st.st_mode) or st.st_size >= self.offset + self.length


class SpanError(IscsiError, OSError):
    """A data segment's file could not give its bytes: closed, or shorter than the
    span (it shrank). The PDU that promised them cannot be completed."""

    def __init__(self, code: int, message: str, span: FileSpan) -> None:
        super().__init__(code, message)
        self.span = span


@dataclass(slots=True, kw_only=True)
class Pdu:
    """Fields every PDU has.  Subclasses name the opcode-specific ones."""

    OPCODE: ClassVar[Opcode]
    HEADER: ClassVar[Header]  # the BHS layout; the codec is generated from it
    immediate: bool = False
    final: bool = True
    itt: int = RESERVED_TAG
    ahs: bytes = b""
    data: bytes | bytearray | memoryview = b""
    span: FileSpan | None = None  # the data segment, sent from a file instead of data

    def data_length(self) -> int:
        """DataSegmentLength: of the span where there is one, else of ``data``."""
        return len(self.data) if self.span is None else self.span.length

    def wire_ahs(self) -> bytes:
        """The AHS as sent (a SCSI Command builds its Extended CDB here)."""
        return self.ahs

    def encode_header(self) -> bytes:
        """The BHS and AHS (generated from :attr:`HEADER` by :func:`compile_header`)."""
        raise NotImplementedError

    def declared_header(self) -> bytes:
        """The BHS and AHS as :attr:`HEADER` declares them, even where a class keeps a
        faster encoder of its own (Data-In)."""
        raise NotImplementedError

    @classmethod
    def _from(cls, b1: int, b2: int, b3: int, b8: bytes, w: tuple[int, ...]) -> Self:
        """The PDU from its unpacked BHS (generated from :attr:`HEADER`)."""
        raise NotImplementedError


# ---------------------------------------------------------------- initiator PDUs


@compile_header
@dataclass(slots=True, kw_only=True)
class NopOut(Pdu):
    OPCODE: ClassVar[Opcode] = Opcode.NOP_OUT
    HEADER: ClassVar[Header] = Header(
        fixed=0x80,
        b8=(("lun", 8),),
        words=("itt", "ttt", "cmdsn", "expstatsn", None, None, None, None),
    )
    lun: bytes = bytes(8)
    ttt: int = RESERVED_TAG
    cmdsn: int = 0
    expstatsn: int = 0


class TaskAttr(IntEnum):
    UNTAGGED = 0
    SIMPLE = 1
    ORDERED = 2
    HEAD_OF_QUEUE = 3
    ACA = 4


@compile_header
@dataclass(slots=True, kw_only=True)
class ScsiCommand(Pdu):
    OPCODE: ClassVar[Opcode] = Opcode.SCSI_COMMAND
    HEADER: ClassVar[Header] = Header(
        flags=(("final", 0x80), ("read", 0x40), ("write", 0x20), ("attr", 0x07)),
        b8=(("lun", 8),),
        words=("itt", "expected_length", "cmdsn", "expstatsn"),
        cdb=True,
    )
    read: bool = False
    write: bool = False
    attr: int = TaskAttr.SIMPLE
    lun: bytes = bytes(8)
    expected_length: int = 0
    cmdsn: int = 0
    expstatsn: int = 0
    cdb: bytes = bytes(16)

    def wire_ahs(self) -> bytes:
        """A CDB longer than 16 bytes goes on in an Extended CDB AHS."""
        if len(self.cdb) > 16 and not self.ahs:
            return build_ahs(AhsType.EXTENDED_CDB, b"\0" + self.cdb[16:])
        return self.ahs

    @classmethod
    def decode_cdb(cls, bhs: bytes, ahs: bytes) -> bytes:
        """The whole CDB: 16 bytes of BHS plus an Extended CDB AHS if present."""
        cdb = bytes(bhs[32:48])
        for kind, specific in parse_ahs(ahs, bhs):
            if kind == AhsType.EXTENDED_CDB:
                cdb += specific[1:]
        return cdb


class TmfFunction(IntEnum):
    ABORT_TASK = 1
    ABORT_TASK_SET = 2
    CLEAR_ACA = 3
    CLEAR_TASK_SET = 4
    LOGICAL_UNIT_RESET = 5
    TARGET_WARM_RESET = 6
    TARGET_COLD_RESET = 7
    TASK_REASSIGN = 8


class TmfResponse(IntEnum):
    COMPLETE = 0
    NO_TASK = 1
    NO_LUN = 2
    TASK_ALLEGIANT = 3
    NO_REASSIGN = 4
    NOT_SUPPORTED = 5
    AUTH_FAILED = 6
    REJECTED = 255


@compile_header
@dataclass(slots=True, kw_only=True)
class TaskMgmtRequest(Pdu):
    OPCODE: ClassVar[Opcode] = Opcode.TASK_MGMT_REQUEST
    HEADER: ClassVar[Header] = Header(
        fixed=0x80,
        flags=(("function", 0x7F),),
        b8=(("lun", 8),),
        words=("itt", "ref_task_tag", "cmdsn", "expstatsn", "ref_cmdsn", "expdatasn", None, None),
    )
    function: int = TmfFunction.ABORT_TASK
    lun: bytes = bytes(8)
    ref_task_tag: int = RESERVED_TAG
    cmdsn: int = 0
    expstatsn: int = 0
    ref_cmdsn: int = 0
    expdatasn: int = 0


class Stage(IntEnum):
    SECURITY = 0
    OPERATIONAL = 1
    FULL_FEATURE = 3


def _login_flags(transit: bool, cont: bool, csg: int, nsg: int) -> int:
    return (0x80 if transit else 0) | (0x40 if cont else 0) | (csg & 3) << 2 | (nsg & 3)


@compile_header
@dataclass(slots=True, kw_only=True)
class LoginRequest(Pdu):
    OPCODE: ClassVar[Opcode] = Opcode.LOGIN_REQUEST
    HEADER: ClassVar[Header] = Header(
        flags=(("transit", 0x80), ("cont", 0x40), ("csg", 0x0C), ("nsg", 0x03)),
        byte2="version_max",
        byte3="version_min",
        b8=(("isid", 6), ("tsih", 2)),
        int_b8=frozenset({"tsih"}),
        words=("itt", (("cid", 16, 16),), "cmdsn", "expstatsn", None, None, None, None),
    )
    immediate: bool = True
    transit: bool = False
    cont: bool = False
    csg: int = 0
    nsg: int = 0
    version_max: int = 0
    version_min: int = 0
    isid: bytes = bytes(6)
    tsih: int = 0
    cid: int = 0
    cmdsn: int = 0
    expstatsn: int = 0


@compile_header
@dataclass(slots=True, kw_only=True)
class TextRequest(Pdu):
    OPCODE: ClassVar[Opcode] = Opcode.TEXT_REQUEST
    HEADER: ClassVar[Header] = Header(
        flags=(("final", 0x80), ("cont", 0x40)),
        b8=(("lun", 8),),
        words=("itt", "ttt", "cmdsn", "expstatsn", None, None, None, None),
    )
    cont: bool = False
    lun: bytes = bytes(8)
    ttt: int = RESERVED_TAG
    cmdsn: int = 0
    expstatsn: int = 0


@compile_header
@dataclass(slots=True, kw_only=True)
class DataOut(Pdu):
    OPCODE: ClassVar[Opcode] = Opcode.DATA_OUT
    HEADER: ClassVar[Header] = Header(
        flags=(("final", 0x80),),
        b8=(("lun", 8),),
        words=("itt", "ttt", None, "expstatsn", None, "datasn", "offset", None),
    )
    lun: bytes = bytes(8)
    ttt: int = RESERVED_TAG
    expstatsn: int = 0
    datasn: int = 0
    offset: int = 0


class LogoutReason(IntEnum):
    CLOSE_SESSION = 0
    CLOSE_CONNECTION = 1
    REMOVE_CONNECTION_FOR_RECOVERY = 2


@compile_header
@dataclass(slots=True, kw_only=True)
class LogoutRequest(Pdu):
    OPCODE: ClassVar[Opcode] = Opcode.LOGOUT_REQUEST
    HEADER: ClassVar[Header] = Header(
        fixed=0x80,
        flags=(("reason", 0x7F),),
        words=("itt", (("cid", 16, 16),), "cmdsn", "expstatsn", None, None, None, None),
    )
    reason: int = LogoutReason.CLOSE_SESSION
    cid: int = 0
    cmdsn: int = 0
    expstatsn: int = 0


@compile_header
@dataclass(slots=True, kw_only=True)
class SnackRequest(Pdu):
    OPCODE: ClassVar[Opcode] = Opcode.SNACK_REQUEST
    HEADER: ClassVar[Header] = Header(
        fixed=0x80,
        flags=(("snack_type", 0x0F),),
        b8=(("lun", 8),),
        words=("itt", "ttt", None, "expstatsn", None, None, "begrun", "runlength"),
    )
    snack_type: int = 0
    lun: bytes = bytes(8)
    ttt: int = RESERVED_TAG
    expstatsn: int = 0
    begrun: int = 0
    runlength: int = 0


# ---------------------------------------------------------------- target PDUs


@dataclass(slots=True, kw_only=True)
class _TargetPdu(Pdu):
    statsn: int = 0
    expcmdsn: int = 0
    maxcmdsn: int = 0


@compile_header
@dataclass(slots=True, kw_only=True)
class NopIn(_TargetPdu):
    OPCODE: ClassVar[Opcode] = Opcode.NOP_IN
    HEADER: ClassVar[Header] = Header(
        fixed=0x80,
        b8=(("lun", 8),),
        words=("itt", "ttt", "statsn", "expcmdsn", "maxcmdsn", None, None, None),
    )
    lun: bytes = bytes(8)
    ttt: int = RESERVED_TAG


@compile_header
@dataclass(slots=True, kw_only=True)
class ScsiResponse(_TargetPdu):
    OPCODE: ClassVar[Opcode] = Opcode.SCSI_RESPONSE
    HEADER: ClassVar[Header] = Header(
        fixed=0x80,
        flags=(
            ("bidi_overflow", 0x10),
            ("bidi_underflow", 0x08),
            ("overflow", 0x04),
            ("underflow", 0x02),
        ),
        byte2="response",
        byte3="status",
        words=(
            "itt",
            "snack_tag",
            "statsn",
            "expcmdsn",
            "maxcmdsn",
            "expdatasn",
            "bidi_residual",
            "residual",
        ),
    )
    response: int = 0
    status: int = 0
    bidi_overflow: bool = False
    bidi_underflow: bool = False
    overflow: bool = False
    underflow: bool = False
    snack_tag: int = 0
    expdatasn: int = 0
    bidi_residual: int = 0
    residual: int = 0


@compile_header
@dataclass(slots=True, kw_only=True)
class TaskMgmtResponse(_TargetPdu):
    OPCODE: ClassVar[Opcode] = Opcode.TASK_MGMT_RESPONSE
    HEADER: ClassVar[Header] = Header(
        fixed=0x80,
        byte2="response",
        words=("itt", None, "statsn", "expcmdsn", "maxcmdsn", None, None, None),
    )
    response: int = TmfResponse.COMPLETE


@compile_header
@dataclass(slots=True, kw_only=True)
class LoginResponse(_TargetPdu):
    OPCODE: ClassVar[Opcode] = Opcode.LOGIN_RESPONSE
    HEADER: ClassVar[Header] = Header(
        flags=(("transit", 0x80), ("cont", 0x40), ("csg", 0x0C), ("nsg", 0x03)),
        byte2="version_max",
        byte3="version_active",
        b8=(("isid", 6), ("tsih", 2)),
        int_b8=frozenset({"tsih"}),
        words=(
            "itt",
            None,
            "statsn",
            "expcmdsn",
            "maxcmdsn",
            (("status_class", 24, 8), ("status_detail", 16, 8)),
            None,
            None,
        ),
    )
    transit: bool = False
    cont: bool = False
    csg: int = 0
    nsg: int = 0
    version_max: int = 0
    version_active: int = 0
    isid: bytes = bytes(6)
    tsih: int = 0
    status_class: int = 0
    status_detail: int = 0


@compile_header
@dataclass(slots=True, kw_only=True)
class TextResponse(_TargetPdu):
    OPCODE: ClassVar[Opcode] = Opcode.TEXT_RESPONSE
    HEADER: ClassVar[Header] = Header(
        flags=(("final", 0x80), ("cont", 0x40)),
        b8=(("lun", 8),),
        words=("itt", "ttt", "statsn", "expcmdsn", "maxcmdsn", None, None, None),
    )
    cont: bool = False
    lun: bytes = bytes(8)
    ttt: int = RESERVED_TAG


@compile_header
@dataclass(slots=True, kw_only=True)
class DataIn(_TargetPdu):
    OPCODE: ClassVar[Opcode] = Opcode.DATA_IN
    HEADER: ClassVar[Header] = Header(
        flags=(
            ("final", 0x80),
            ("ack", 0x40),
            ("overflow", 0x04),
            ("underflow", 0x02),
            ("has_status", 0x01),
        ),
        byte3="status",
        b8=(("lun", 8),),
        words=("itt", "ttt", "statsn", "expcmdsn", "maxcmdsn", "datasn", "offset", "residual"),
    )
    ack: bool = False
    overflow: bool = False
    underflow: bool = False
    has_status: bool = False
    status: int = 0
    lun: bytes = bytes(8)
    ttt: int = RESERVED_TAG
    datasn: int = 0
    offset: int = 0
    residual: int = 0

    def encode_header(self) -> bytes:
        """:func:`data_in_header`, the read path's encoder, with the S bit's rule: status
        and StatSN are sent only with it (tests check it against :attr:`HEADER`)."""
        b1 = (0x80 if self.final else 0) | (0x40 if self.ack else 0) | (self.overflow << 2)
        b1 |= (self.underflow << 1) | int(self.has_status)
        status = self.status if self.has_status else 0
        statsn = self.statsn if self.has_status else 0
        return data_in_header(
            b1,
            status,
            self.lun,
            self.itt,
            self.ttt,
            statsn,
            self.expcmdsn,
            self.maxcmdsn,
            self.datasn,
            self.offset,
            self.residual,
            len(self.data),
        )


def data_in_header(  # noqa: PLR0917 - positional: the hot path of every read
    b1: int,
    status: int,
    lun: bytes,
    itt: int,
    ttt: int,
    statsn: int,
    expcmdsn: int,
    maxcmdsn: int,
    datasn: int,
    offset: int,
    residual: int,
    data_len: int,
) -> bytes:
    """The BHS of a Data-In PDU from its raw fields: the read path's fast encoder."""
    return _BHS.pack(
        0x25,
        b1,
        0,
        status,
        data_len,
        lun,
        itt,
        ttt,
        statsn,
        expcmdsn,
        maxcmdsn,
        datasn,
        offset,
        residual,
    )


DATA_IN_FINAL = 0x80
DATA_IN_STATUS = 0x01
DATA_IN_OVERFLOW = 0x04
DATA_IN_UNDERFLOW = 0x02


class LogoutResponseCode(IntEnum):
    CLOSED = 0
    CID_NOT_FOUND = 1
    RECOVERY_NOT_SUPPORTED = 2
    CLEANUP_FAILED = 3


@compile_header
@dataclass(slots=True, kw_only=True)
class LogoutResponse(_TargetPdu):
    OPCODE: ClassVar[Opcode] = Opcode.LOGOUT_RESPONSE
    HEADER: ClassVar[Header] = Header(
        fixed=0x80,
        byte2="response",
        words=(
            "itt",
            None,
            "statsn",
            "expcmdsn",
            "maxcmdsn",
            None,
            (("time2wait", 16, 16), ("time2retain", 0, 16)),
            None,
        ),
    )
    response: int = LogoutResponseCode.CLOSED
    time2wait: int = 0
    time2retain: int = 0


@compile_header
@dataclass(slots=True, kw_only=True)
class R2T(_TargetPdu):
    OPCODE: ClassVar[Opcode] = Opcode.R2T
    HEADER: ClassVar[Header] = Header(
        fixed=0x80,
        b8=(("lun", 8),),
        words=("itt", "ttt", "statsn", "expcmdsn", "maxcmdsn", "r2tsn", "offset", "length"),
    )
    lun: bytes = bytes(8)
    ttt: int = 0
    r2tsn: int = 0
    offset: int = 0
    length: int = 0


class AsyncEvent(IntEnum):
    SCSI_EVENT = 0
    LOGOUT_REQUEST = 1
    CONNECTION_DROP = 2
    SESSION_DROP = 3
    NEGOTIATION_REQUEST = 4
    TASK_TERMINATION = 5
    VENDOR = 255


@compile_header
@dataclass(slots=True, kw_only=True)
class AsyncMessage(_TargetPdu):
    OPCODE: ClassVar[Opcode] = Opcode.ASYNC_MESSAGE
    HEADER: ClassVar[Header] = Header(
        fixed=0x80,
        b8=(("lun", 8),),
        words=(
            "itt",
            None,
            "statsn",
            "expcmdsn",
            "maxcmdsn",
            (("event", 24, 8), ("vcode", 16, 8), ("parameter1", 0, 16)),
            (("parameter2", 16, 16), ("parameter3", 0, 16)),
            None,
        ),
    )
    lun: bytes = bytes(8)
    event: int = AsyncEvent.LOGOUT_REQUEST
    vcode: int = 0
    parameter1: int = 0
    parameter2: int = 0
    parameter3: int = 0


@compile_header
@dataclass(slots=True, kw_only=True)
class Reject(_TargetPdu):
    OPCODE: ClassVar[Opcode] = Opcode.REJECT
    HEADER: ClassVar[Header] = Header(
        fixed=0x80,
        byte2="reason",
        words=(RESERVED_TAG, None, "statsn", "expcmdsn", "maxcmdsn", "datasn", None, None),
    )
    reason: int = RejectReason.PROTOCOL_ERROR
    datasn: int = 0


# ---------------------------------------------------------------- decode / encode

PDU_CLASSES: dict[int, type[Pdu]] = {
    cls.OPCODE: cls
    for cls in (
        NopOut,
        ScsiCommand,
        TaskMgmtRequest,
        LoginRequest,
        TextRequest,
        DataOut,
        LogoutRequest,
        SnackRequest,
        NopIn,
        ScsiResponse,
        TaskMgmtResponse,
        LoginResponse,
        TextResponse,
        DataIn,
        LogoutResponse,
        R2T,
        AsyncMessage,
        Reject,
    )
}

# PDUs whose data segment must be empty (RFC 7143 §11: "DataSegmentLength ... MUST be 0").
_NO_DATA = frozenset(
    {
        Opcode.TASK_MGMT_REQUEST,
        Opcode.LOGOUT_REQUEST,
        Opcode.SNACK_REQUEST,
        Opcode.TASK_MGMT_RESPONSE,
        Opcode.LOGOUT_RESPONSE,
        Opcode.R2T,
    }
)


def decode(
    bhs: bytes | bytearray | memoryview,
    ahs: bytes = b"",
    data: bytes | bytearray | memoryview = b"",
) -> Pdu:
    """Decode one PDU whose digests (if any) were already checked and stripped.

    ``data`` is the data segment without padding.  Raises :class:`PduError`.
    """
    header = bhs if type(bhs) is bytes and len(bhs) == BHS_LEN else bytes(bhs[:BHS_LEN])
    if len(header) != BHS_LEN:
        raise PduError("truncated BHS", RejectReason.PROTOCOL_ERROR, header, fatal=True)
    fields = _BHS.unpack(header)
    b0, b1, b2, b3, w1, b8 = fields[:6]
    op = b0 & 0x3F
    cls = PDU_CLASSES.get(op)
    if cls is None:
        raise PduError(f"unknown opcode 0x{op:02x}", RejectReason.COMMAND_NOT_SUPPORTED, header)
    _check_lengths(header, op, w1, ahs, data)
    immediate = bool(b0 & 0x40)
    if immediate and op not in IMMEDIATE_ALLOWED:
        raise PduError(f"{cls.__name__} marked immediate", RejectReason.PROTOCOL_ERROR, header)
    pdu = cls._from(b1, b2, b3, b8, fields[6:])
    pdu.immediate = immediate
    pdu.data = data
    if ahs:
        pdu.ahs = bytes(ahs)
    if op == Opcode.SCSI_COMMAND:
        assert isinstance(pdu, ScsiCommand)
        pdu.cdb = header[32:48] if not ahs else ScsiCommand.decode_cdb(header, pdu.ahs)
    elif ahs:
        parse_ahs(pdu.ahs, header)
    return pdu


def _check_lengths(
    header: bytes, op: int, w1: int, ahs: bytes, data: bytes | bytearray | memoryview
) -> None:
    if (w1 >> 24) * 4 != len(ahs):
        raise PduError("AHS length mismatch", RejectReason.PROTOCOL_ERROR, header, fatal=True)
    if (w1 & 0xFFFFFF) != len(data):
        raise PduError("data length mismatch", RejectReason.PROTOCOL_ERROR, header, fatal=True)
    if data and op in _NO_DATA:
        name = Opcode(op).name
        raise PduError(f"{name} with a data segment", RejectReason.PROTOCOL_ERROR, header)


Buffer = bytes | bytearray | memoryview


Segment = Buffer | FileSpan


def encode(pdu: Pdu, *, header_digest: bool = False, data_digest: bool = False) -> list[Buffer]:
    """Wire bytes of ``pdu`` as a list of buffers (header, data, padding+digest).

    The data segment is passed through uncopied (a memoryview stays a view).
    A PDU with a :attr:`Pdu.span` goes through :func:`encode_parts`.
    """
    if pdu.span is not None:
        raise ValueError("a PDU with a FileSpan is encoded with encode_parts")
    parts: list[Buffer] = [_header(pdu, header_digest)]
    data = pdu.data
    if data:
        parts.append(data)
        tail = pad_bytes(len(data))
        if data_digest:
            tail += digest(data, tail)
        parts.append(tail)
    return parts


def encode_parts(
    pdu: Pdu, *, header_digest: bool = False, data_digest: bool = False
) -> list[Segment]:
    """Like :func:`encode`, with a :attr:`Pdu.span` passed through as it is, for a
    transport that sends it from its file.  A data digest needs the bytes: a span
    cannot have one (the transport reads it first, :meth:`FileSpan.read`)."""
    span = pdu.span
    if span is None:
        return [*encode(pdu, header_digest=header_digest, data_digest=data_digest)]
    if data_digest:
        raise ValueError("a data digest needs the data segment's bytes, not a FileSpan")
    parts: list[Segment] = [_header(pdu, header_digest)]
    if span.length:
        parts.append(span)
        if tail := pad_bytes(span.length):
            parts.append(tail)
    return parts


def _header(pdu: Pdu, header_digest: bool) -> bytes:
    header = pdu.encode_header()
    return header + digest(header) if header_digest else header


def encode_bytes(pdu: Pdu, *, header_digest: bool = False, data_digest: bool = False) -> bytes:
    return b"".join(encode(pdu, header_digest=header_digest, data_digest=data_digest))
