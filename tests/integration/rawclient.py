"""A small blocking iSCSI client for tests: it logs in with the project's codec
and CHAP helpers, then sends any PDU (well-formed or not) and reads answers.

It exists to put bad input on the wire (truncated PDUs, bad digests, wrong
secrets); the conformance of the target is checked with libiscsi's tools.
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass, field

from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.chap import ChapInitiator, ChapSecret
from reservoir.agent.iscsi.receiver import Receiver
from reservoir.agent.iscsi.text import encode_text, parse_text

INITIATOR = "iqn.2026-11.org.reservoir:test-client"


class LoginFailedError(Exception):
    def __init__(self, status_class: int, status_detail: int) -> None:
        super().__init__(f"login failed with status {status_class:02x}{status_detail:02x}")
        self.status = (status_class, status_detail)


@dataclass
class ScsiAnswer:
    status: int
    data: bytes
    sense: bytes
    response: P.ScsiResponse | P.DataIn | None = None


@dataclass
class RawClient:
    host: str
    port: int
    timeout: float = 5.0
    header_digest: bool = False
    data_digest: bool = False
    sock: socket.socket | None = None
    rx: Receiver = field(default_factory=Receiver)
    itt: int = 1
    cmdsn: int = 1
    expstatsn: int = 0
    tsih: int = 0
    isid: bytes = field(default_factory=lambda: bytes([0x80]) + os.urandom(5))
    params: dict[str, str] = field(default_factory=dict)
    source: str | None = None  # the local address to connect from (any when None)

    # ------------------------------------------------------------ transport

    def connect(self) -> RawClient:
        source = None if self.source is None else (self.source, 0)
        self.sock = socket.create_connection(
            (self.host, self.port), timeout=self.timeout, source_address=source
        )
        return self

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __enter__(self) -> RawClient:
        return self.connect() if self.sock is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        assert self.sock is not None
        self.sock.sendall(data)

    def send(self, pdu: P.Pdu) -> None:
        self.send_raw(
            P.encode_bytes(pdu, header_digest=self.header_digest, data_digest=self.data_digest)
        )

    def recv(self) -> P.Pdu:
        """The next PDU; raises ConnectionError when the target closed the connection."""
        assert self.sock is not None
        while (frame := self.rx.next()) is None:
            got = self.sock.recv_into(self.rx.get_buffer())
            if not got:
                raise ConnectionError("target closed the connection")
            self.rx.received(got)
        pdu = P.decode(*frame)
        if isinstance(pdu, P.ScsiResponse | P.NopIn | P.TextResponse | P.LogoutResponse | P.Reject):
            self.expstatsn = (pdu.statsn + 1) & 0xFFFFFFFF
        return pdu

    def closed_by_target(self) -> bool:
        """True if the target closes the connection (reads until EOF or timeout)."""
        try:
            while True:
                self.recv()
        except (ConnectionError, OSError):
            return True
        except TimeoutError:
            return False

    def next_itt(self) -> int:
        self.itt += 1
        return self.itt

    # ------------------------------------------------------------ login

    def login(
        self,
        target: str | None,
        *,
        initiator: str = INITIATOR,
        chap: tuple[str, str] | None = None,
        mutual: tuple[str, str] | None = None,
        keys: list[tuple[str, str]] | None = None,
        cid: int = 0,
    ) -> P.LoginResponse:
        first = [("InitiatorName", initiator)]
        first.append(("SessionType", "Normal" if target else "Discovery"))
        if target:
            first.append(("TargetName", target))
        if chap:
            self._security(first, chap, mutual, cid)
            first = []
        ops = [("HeaderDigest", "CRC32C" if self.header_digest else "None")]
        ops.append(("DataDigest", "CRC32C" if self.data_digest else "None"))
        ops.append(("MaxRecvDataSegmentLength", "262144"))
        if not self.tsih:  # leading-only keys go on the leading connection alone
            ops += keys or [
                ("ImmediateData", "Yes"),
                ("InitialR2T", "No"),
                ("MaxBurstLength", "1048576"),
                ("FirstBurstLength", "262144"),
                ("MaxConnections", "4"),
            ]
        answer = self._login_step(first + ops, csg=1, nsg=3, transit=True, cid=cid)
        while not (answer.transit and answer.nsg == 3):
            answer = self._login_step([], csg=1, nsg=3, transit=True, cid=cid)
        self.tsih = answer.tsih
        self.params.update(parse_text(bytes(answer.data)))
        self.rx.header_digest = self.header_digest
        self.rx.data_digest = self.data_digest
        return answer

    def _security(
        self,
        first: list[tuple[str, str]],
        chap: tuple[str, str],
        mutual: tuple[str, str] | None,
        cid: int,
    ) -> None:
        initiator = ChapInitiator(ChapSecret(*chap), ChapSecret(*mutual) if mutual else None)
        self._login_step(
            [*first, ("AuthMethod", "CHAP,None")], csg=0, nsg=1, transit=False, cid=cid
        )
        answer = self._login_step(
            [("CHAP_A", initiator.algorithms_offer())], csg=0, nsg=1, transit=False, cid=cid
        )
        reply = initiator.respond(dict(parse_text(bytes(answer.data))))
        answer = self._login_step(reply, csg=0, nsg=1, transit=True, cid=cid)
        if mutual:
            initiator.verify_target(dict(parse_text(bytes(answer.data))))

    def _login_step(
        self, pairs: list[tuple[str, str]], *, csg: int, nsg: int, transit: bool, cid: int
    ) -> P.LoginResponse:
        request = P.LoginRequest(
            transit=transit,
            csg=csg,
            nsg=nsg,
            isid=self.isid,
            tsih=self.tsih,
            cid=cid,
            itt=self.itt,
            cmdsn=self.cmdsn,
            expstatsn=self.expstatsn,
            data=encode_text(pairs),
        )
        self.send_raw(P.encode_bytes(request))
        answer = self.recv()
        assert isinstance(answer, P.LoginResponse), answer
        self.expstatsn = (answer.statsn + 1) & 0xFFFFFFFF
        if answer.status_class:
            raise LoginFailedError(answer.status_class, answer.status_detail)
        return answer

    # ------------------------------------------------------------ commands

    def scsi(
        self, cdb: bytes, *, lun: int = 0, read: int = 0, data: bytes = b"", immediate: int = 0
    ) -> ScsiAnswer:
        """One SCSI command: ``data`` written (``immediate`` bytes of it in the command,
        the rest as R2Ts ask), ``read`` bytes expected."""
        itt = self.next_itt()
        cmd = P.ScsiCommand(
            itt=itt,
            cmdsn=self.cmdsn,
            expstatsn=self.expstatsn,
            lun=encode_lun(lun),
            cdb=cdb,
            read=read > 0,
            write=bool(data),
            expected_length=read or len(data),
            data=data[:immediate],
        )
        self.cmdsn += 1
        self.send(cmd)
        return self._collect(itt, lun, data)

    def _collect(self, itt: int, lun: int, data: bytes) -> ScsiAnswer:
        buf = bytearray()
        while True:
            pdu = self.recv()
            if isinstance(pdu, P.R2T):
                self._answer_r2t(pdu, lun, data)
            elif isinstance(pdu, P.DataIn):
                buf[pdu.offset : pdu.offset + len(pdu.data)] = pdu.data
                if pdu.has_status:
                    return ScsiAnswer(pdu.status, bytes(buf), b"", pdu)
            elif isinstance(pdu, P.ScsiResponse):
                sense = bytes(pdu.data[2:]) if pdu.data else b""
                return ScsiAnswer(pdu.status, bytes(buf), sense, pdu)
            elif isinstance(pdu, P.Reject):
                raise RejectedError(pdu)

    def _answer_r2t(self, r2t: P.R2T, lun: int, data: bytes) -> None:
        mrdsl = int(self.params.get("MaxRecvDataSegmentLength", "8192"))
        end = r2t.offset + r2t.length
        for datasn, off in enumerate(range(r2t.offset, end, mrdsl)):
            chunk = data[off : min(off + mrdsl, end)]
            self.send(
                P.DataOut(
                    itt=r2t.itt,
                    ttt=r2t.ttt,
                    lun=encode_lun(lun),
                    datasn=datasn,
                    offset=off,
                    data=chunk,
                    final=off + len(chunk) >= end,
                    expstatsn=self.expstatsn,
                )
            )

    def clear_unit_attention(self, lun: int = 0) -> None:
        """TEST UNIT READY until GOOD: a new I_T nexus first sees POWER ON (29/00)."""
        for _ in range(4):
            if self.scsi(bytes(6), lun=lun).status == 0:
                return
        raise AssertionError("TEST UNIT READY never returned GOOD")

    def nop(self, data: bytes = b"") -> P.NopIn:
        itt = self.next_itt()
        self.send(
            P.NopOut(itt=itt, cmdsn=self.cmdsn, expstatsn=self.expstatsn, data=data, immediate=True)
        )
        while True:
            pdu = self.recv()
            if isinstance(pdu, P.NopIn) and pdu.itt == itt:
                return pdu

    def logout(self) -> P.LogoutResponse:
        itt = self.next_itt()
        self.send(
            P.LogoutRequest(itt=itt, cmdsn=self.cmdsn, expstatsn=self.expstatsn, immediate=True)
        )
        pdu = self.recv()
        assert isinstance(pdu, P.LogoutResponse)
        return pdu


class RejectedError(Exception):
    def __init__(self, reject: P.Reject) -> None:
        super().__init__(f"Reject reason {reject.reason:#x}")
        self.reject = reject


def encode_lun(lun: int) -> bytes:
    """SAM peripheral (LUN < 256) or flat addressing in the first two bytes."""
    first = struct.pack(">H", lun if lun < 256 else 0x4000 | lun)
    return first + bytes(6)


def read16(lba: int, blocks: int) -> bytes:
    return struct.pack(">BBQIBB", 0x88, 0, lba, blocks, 0, 0)


def write16(lba: int, blocks: int) -> bytes:
    return struct.pack(">BBQIBB", 0x8A, 0, lba, blocks, 0, 0)


def sense_key_asc(sense: bytes) -> tuple[int, int, int]:
    """(sense key, ASC, ASCQ) from fixed (0x70/0x71) or descriptor (0x72/0x73) sense."""
    if sense[0] & 0x7F in (0x72, 0x73):
        return sense[1] & 0x0F, sense[2], sense[3]
    return sense[2] & 0x0F, sense[12], sense[13]
