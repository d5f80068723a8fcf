"""One iSCSI connection on the target: framing, login phase, full feature phase.

The connection is an asyncio BufferedProtocol.  Bytes are read into the
buffers of a sans-IO :class:`~reservoir.agent.iscsi.receiver.Receiver` (write
data straight into the PDU's own buffer); whole PDUs are handled by the
login glue (:mod:`.login_phase`) until the login completes, then by the
full feature handlers below.  Protocol errors are answered on the wire
(Reject, login status) and logged; only a lost framing closes the connection.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from collections import deque
from typing import TYPE_CHECKING

from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.digest import digest
from reservoir.agent.iscsi.negotiation import ConnectionParams, SessionParams
from reservoir.agent.iscsi.receiver import Receiver
from reservoir.agent.target import full_feature
from reservoir.agent.target.login_guard import PendingLogin
from reservoir.agent.target.login_phase import LoginPhase

if TYPE_CHECKING:
    from reservoir.agent.target.server import Portal, TargetServer
    from reservoir.agent.target.session import Session
    from reservoir.agent.target.tasks import ScsiTask

log = logging.getLogger("reservoir.target")

LOGIN_MAX_DATA = 8192  # RFC 7143 §6.1: text during login is limited to 8192 bytes a PDU
RCVLOWAT_MIN = 16 << 10  # the rest of a PDU shorter than this is awaited the usual way
RCVLOWAT_MAX = 256 << 10  # at most this much is awaited before a wakeup


def low_water_mark(sock: socket.socket, missing: int) -> int:
    """The SO_RCVLOWAT to await ``missing`` bytes with: at most RCVLOWAT_MAX and a
    quarter of the socket's receive buffer (see :meth:`Connection._await_rest`); 1
    (the default) when that is under RCVLOWAT_MIN."""
    want = min(missing, RCVLOWAT_MAX)
    if want >= RCVLOWAT_MIN:  # only then is the buffer worth a system call
        want = min(want, sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 4)
    return want if want >= RCVLOWAT_MIN else 1


class Connection(asyncio.BufferedProtocol):
    def __init__(self, server: TargetServer, portal: Portal) -> None:
        self.server = server
        self.portal = portal
        self.transport: asyncio.Transport | None = None
        self.rx = Receiver(max_data=LOGIN_MAX_DATA, pool=server.buffers)
        self.peer = "?"
        self.local: tuple[str, int] = (portal.host, portal.port)
        self.cid = 0
        self.statsn = 0
        self.session: Session | None = None
        self.conn_params: ConnectionParams | None = None
        self.login: LoginPhase | None = LoginPhase(self)
        self.pending_login: PendingLogin | None = None  # its place among those in login
        self.tasks: dict[int, ScsiTask] = {}
        self.failed_itts: deque[int] = deque(maxlen=64)  # writes ended on a Data-Out error
        self.pending_text = b""  # the rest of a long Text Response (continuation)
        self._out: list[P.Buffer] = []  # PDUs sent in this loop iteration, not yet written
        self._ttt = itertools.count(1)
        self._writable = asyncio.Event()
        self._writable.set()
        self._nop_timer: asyncio.TimerHandle | None = None
        self._nop_outstanding: int | None = None
        self.last_rx = 0.0
        self.closed = False
        self._lowat = 1  # the socket's SO_RCVLOWAT

    # ------------------------------------------------------------ asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        if sock:
            self.local = (sock[0], sock[1])
        address = peer[0] if peer else "?"
        self.pending_login = self.server.login_guard.admit(address, self.peer, self._login_expired)
        if self.pending_login is None:  # over a bound: closed before anything is read
            self._abort()
            return
        self.server.connections.add(self)
        log.debug("connection from %s on %s", self.peer, self.portal.label)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.rx.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_rx = asyncio.get_running_loop().time()
        self.rx.received(nbytes)
        while not self.closed:
            try:
                frame = self.rx.next()
                if frame is None:
                    self._await_rest()
                    return
                self._handle(P.decode(*frame))
            except P.PduError as exc:
                self._protocol_error(exc)

    def _await_rest(self) -> None:
        """Be woken once the rest of a large PDU under way has arrived, not for every
        few segments of it (SO_RCVLOWAT, capped at RCVLOWAT_MAX): on a long path with
        many connections each wakeup brings a few KiB, and the per-wakeup work, not
        the copying, was most of the target's CPU. Its sender owes those bytes, so
        nothing waits on data that may never come; a closed connection still wakes.

        A low-water mark is kept under a quarter of the socket's receive buffer: one
        that needs a bigger buffer makes Linux grow the buffer to it *and clamp the
        receive window at the mark*, which held every stream of a 350 ms path at
        256 KiB in flight for a second of its ramp, until autotuning lifted it."""
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None or self._lowat < 0:
            return
        try:
            want = low_water_mark(sock, self.rx.missing())
            if want != self._lowat:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, want)
                self._lowat = want
        except (OSError, AttributeError):
            self._lowat = -1  # not settable here (not a TCP socket): leave it

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._leave_login()
        self._cancel_nop()
        self.server.connections.discard(self)
        for task in list(self.tasks.values()):
            task.abort()
        self.tasks.clear()
        self.rx.release()
        if self.session is not None:
            self.server.connection_gone(self)
        log.debug("connection %s closed (%s)", self.peer, exc or "normally")

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    async def drain(self) -> None:
        """Wait while the transport's buffer is over its high-water mark."""
        if not self._writable.is_set():
            await self._writable.wait()

    # ------------------------------------------------------------ dispatch

    def _handle(self, pdu: P.Pdu) -> None:
        if self.login is not None:
            self.login.handle(pdu)
        else:
            full_feature.handle(self, pdu)

    def _protocol_error(self, exc: P.PduError) -> None:
        log.warning("%s: %s", self.peer, exc)
        if self.login is not None:
            self.close(f"bad PDU during login: {exc}")
            return
        self.send_reject(exc.reason, exc.header)
        if exc.fatal:
            self.close(f"protocol error: {exc}")

    def deliver(self, pdu: P.Pdu) -> None:
        """Called by the session in CmdSN order."""
        full_feature.deliver(self, pdu)

    def login_complete(self, session: Session, params: ConnectionParams) -> None:
        self.login = None
        self.session = session
        self.conn_params = params
        self.rx.header_digest = params.header_digest
        self.rx.data_digest = params.data_digest
        self.rx.max_data = params.max_recv_data_segment_length_target
        if not session.is_discovery:  # a discovery session stays in login until it ends
            self._leave_login()
        self._arm_nop()

    def _leave_login(self) -> None:
        if self.pending_login is not None:
            self.pending_login.done()
            self.pending_login = None

    def _login_expired(self, pending: PendingLogin) -> None:
        """The login timeout passed since accept: close at once, unread data and all."""
        if self.closed:
            return
        if self.session is None:
            what = f"login from {self.peer} not complete"
        else:
            what = f"discovery session from {self.peer} not ended"
        self.server.login_guard.log_expired(what, pending.elapsed())
        self._leave_login()
        self._abort()

    def _abort(self) -> None:
        """Closed at once: nothing more is read or written (unread data: a reset)."""
        self.closed = True
        self._cancel_nop()
        if self.transport is not None:
            self.transport.abort()

    # ------------------------------------------------------------ sending

    @property
    def session_params(self) -> SessionParams:
        assert self.session is not None
        return self.session.params

    def send(self, pdu: P.Pdu, *, status: bool = True) -> None:
        """Send a PDU; ``status`` PDUs take (and advance) the connection's StatSN."""
        if self.closed or self.transport is None:
            return
        if isinstance(pdu, P._TargetPdu):
            self._stamp(pdu, status)
        params = self.conn_params
        hd = params.header_digest if params else False
        dd = params.data_digest if params else False
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out += P.encode(pdu, header_digest=hd, data_digest=dd)

    def send_read_data(
        self, itt: int, lun: bytes, data: memoryview, flags: int, residual: int
    ) -> None:
        """A read's only Data-In PDU, status collapsed: the hot path of small reads.

        ``flags`` are the DATA_IN_* overflow/underflow bits.
        """
        if self.closed or self.session is None:
            return
        session = self.session
        statsn = self.statsn
        self.statsn = (statsn + 1) & 0xFFFFFFFF
        b1 = P.DATA_IN_FINAL | P.DATA_IN_STATUS | flags
        header = P.data_in_header(
            b1,
            0,
            lun,
            itt,
            P.RESERVED_TAG,
            statsn,
            session.exp_cmdsn,
            session.max_cmdsn,
            0,
            0,
            residual,
            len(data),
        )
        params = self.conn_params
        assert params is not None
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        out = self._out
        if params.header_digest:
            header += digest(header)
        out.append(header)
        out.append(data)
        tail = P.pad_bytes(len(data))
        if params.data_digest:
            tail += digest(data, tail)
        if tail:
            out.append(tail)

    def _flush(self) -> None:
        """Write what this loop iteration sent in one go (one syscall, not one per PDU)."""
        out, self._out = self._out, []
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(out)

    def _stamp(self, pdu: P._TargetPdu, status: bool) -> None:
        pdu.statsn = self.statsn
        if status:
            self.statsn = (self.statsn + 1) & 0xFFFFFFFF
        if self.session is not None:
            pdu.expcmdsn = self.session.exp_cmdsn
            pdu.maxcmdsn = self.session.max_cmdsn

    def send_reject(self, reason: int, header: bytes, datasn: int = 0) -> None:
        self.send(P.Reject(reason=reason, data=header[: P.BHS_LEN], datasn=datasn))

    def send_r2t(self, task: ScsiTask, ttt: int, r2tsn: int, offset: int, length: int) -> None:
        r2t = P.R2T(lun=task.cmd.lun, itt=task.itt, ttt=ttt, r2tsn=r2tsn)
        r2t.offset, r2t.length = offset, length
        self.send(r2t, status=False)

    def new_ttt(self) -> int:
        ttt = next(self._ttt) & 0xFFFFFFFF
        if ttt == P.RESERVED_TAG:
            self._ttt = itertools.count(1)
            ttt = next(self._ttt)
        return ttt

    def close(self, reason: str) -> None:
        if self.closed:
            return
        log.info("closing connection %s: %s", self.peer, reason)
        self.closed = True
        self._cancel_nop()
        if self.transport is not None:
            self._flush()
            self.transport.close()

    # ------------------------------------------------------------ NOP-In pings
    # The target pings an idle initiator with NOP-In (TTT set, RFC 7143
    # §11.19); a connection silent for a whole interval after a ping is dead.

    def _arm_nop(self, delay: float | None = None) -> None:
        interval = self.server.nop_interval
        if interval > 0 and not self.closed:
            loop = asyncio.get_running_loop()
            self._nop_timer = loop.call_later(delay or interval, self._nop_tick)

    def _cancel_nop(self) -> None:
        if self._nop_timer is not None:
            self._nop_timer.cancel()
            self._nop_timer = None

    def _nop_tick(self) -> None:
        now = asyncio.get_running_loop().time()
        idle = now - self.last_rx
        interval = self.server.nop_interval
        if self._nop_outstanding is not None and idle >= interval:
            self.close(f"no answer to NOP-In ping for {idle:.1f} s")
            return
        if idle < interval:
            self._arm_nop(interval - idle)
            return
        ttt = self.new_ttt()
        self._nop_outstanding = ttt
        self.send(P.NopIn(ttt=ttt, itt=P.RESERVED_TAG), status=False)
        self._arm_nop()

    def nop_answered(self, ttt: int) -> bool:
        if ttt != self._nop_outstanding:
            return False
        self._nop_outstanding = None
        return True
