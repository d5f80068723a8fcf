"""An iSCSI session (RFC 7143 §4): one connection, commands windowed by CmdSN,
NOP pings, ABORT TASK on timeouts, logout, and session reinstatement at
ErrorRecoveryLevel 0 (§6.3.5, §7.1.4.3) when the connection drops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self, TypeVar

from reservoir.agent.initiator._commands import (
    STATUS_CHECK_CONDITION,
    STATUS_GOOD,
    ScsiReply,
    Task,
    WriteData,
    encode_lun,
    read16,
    read_capacity16,
    sense_of,
    solicited_pdus,
    unsolicited_pdus,
    write16,
)
from reservoir.agent.initiator._errors import (
    SENSE_KEY_UNIT_ATTENTION,
    CommandTimeout,
    ConnectionLostError,
    InitiatorError,
    LoginError,
    ScsiError,
)
from reservoir.agent.initiator._login import (
    MAX_LENGTH,
    LoginExchange,
    LoginOptions,
    LoginResult,
    Negotiated,
)
from reservoir.agent.initiator._transport import (
    Connector,
    Mailbox,
    PduTransport,
    Relay,
    TcpTransport,
    tcp_connect,
)
from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.serial import sn_le
from reservoir.common.aio import cancel_and_wait

T = TypeVar("T")
_MASK = 0xFFFFFFFF
UNIT_ATTENTION_RETRIES = 4
TEST_UNIT_READY = bytes(6)  # opcode 00h


def _next_statsn(pdu: P._TargetPdu) -> int | None:
    """The ExpStatSN a target PDU implies: None if it carries no StatSN (R2T, Data-In
    without status); StatSN itself for an unsolicited NOP-In, which does not advance it
    (RFC 7143 §11.19); StatSN + 1 otherwise."""
    if isinstance(pdu, P.R2T) or (isinstance(pdu, P.DataIn) and not pdu.has_status):
        return None
    if isinstance(pdu, P.NopIn) and pdu.itt == P.RESERVED_TAG:
        return pdu.statsn
    return (pdu.statsn + 1) & _MASK


def _is_attention(error: ScsiError) -> bool:
    return error.status == STATUS_CHECK_CONDITION and error.sense_key == SENSE_KEY_UNIT_ATTENTION


def _retrieve(future: asyncio.Future[ScsiReply]) -> None:
    """Marks the outcome of a command nobody awaits as seen."""
    if not future.cancelled():
        future.exception()


def new_isid() -> bytes:
    """A random ISID of type 0x80 (RFC 7143 §10.12.5: random qualifier)."""
    return bytes([0x80]) + os.urandom(5)


@dataclass(frozen=True, slots=True)
class RecoveryPolicy:
    """How hard to try to reinstate a dropped session: attempts and backoff."""

    attempts: int = 5
    first_delay: float = 0.05
    max_delay: float = 2.0


async def connect_and_login(
    connector: Connector,
    host: str,
    port: int,
    *,
    local_address: str | None,
    options: LoginOptions,
    isid: bytes,
) -> tuple[PduTransport, Relay, LoginResult]:
    """A new connection and a leading login on it; the relay still feeds a mailbox."""
    mailbox = Mailbox()
    relay = Relay(mailbox)
    transport = await asyncio.wait_for(connector(host, port, local_address, relay), options.timeout)
    try:
        result = await LoginExchange(transport, mailbox, options, isid=isid).run()
    except BaseException:
        transport.close()
        raise
    transport.set_digests(result.params.header_digest, result.params.data_digest)
    return transport, relay, result


class Session:
    """A logged-in iSCSI session.  Open with :meth:`open`; use as ``async with``."""

    def __init__(
        self,
        host: str,
        port: int,
        options: LoginOptions,
        *,
        connector: Connector,
        local_address: str | None,
        isid: bytes,
        command_timeout: float,
        nop_interval: float,
        recovery: RecoveryPolicy,
    ) -> None:
        self.host, self.port, self.options = host, port, options
        self.connector, self.local_address, self.isid = connector, local_address, isid
        self.command_timeout, self.nop_interval, self.recovery = (
            command_timeout,
            nop_interval,
            recovery,
        )
        self.transport: PduTransport | None = None
        self.params = Negotiated()
        self.tsih = 0
        self.cmdsn = self.exp_cmdsn = self.max_cmdsn = 1
        self.exp_statsn = 0
        self.tasks: dict[int, Task] = {}
        self.waiting: deque[Task] = deque()
        self.pings: dict[int, asyncio.Future[None]] = {}
        self.tmfs: dict[int, asyncio.Future[int]] = {}
        self._itt = 0
        self._closing = False
        self._failed: InitiatorError | None = None
        self._recovering: asyncio.Task[None] | None = None
        self._nop_task: asyncio.Task[None] | None = None
        self.reinstatements = 0
        self.reissued_bytes = 0  # write data sent again after a reinstatement
        self.dropped_at: float | None = None  # when its connection last dropped (monotonic)
        # a unit attention is known to wait for the next command (its user cleared the
        # registrations it had: CLEAR tells every other registered session so); that
        # command costs a round trip more, as it is sent again
        self.attention_expected = False
        # told of every unit attention a command of the session was answered with (LUN,
        # the error), before the command is sent again: a holder of a reservation hears
        # there that the target restarted or that another initiator took it
        self.on_attention: Callable[[int, ScsiError], None] | None = None
        # what its users learned of the target over this login, (question, LUN) ->
        # answer (e.g. whether a LUN is served by a target of ours): kept while the
        # session is pooled between copies, emptied at every login (one that
        # reinstates it may reach another target at the same address)
        self.learned: dict[tuple[str, int], bool] = {}

    # ------------------------------------------------------------ open / close

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        target: str,
        *,
        initiator_name: str,
        chap: tuple[str, str] | None = None,
        mutual_chap: tuple[str, str] | None = None,
        header_digest: bool = False,
        data_digest: bool = False,
        max_recv_data_segment_length: int = MAX_LENGTH,
        max_burst_length: int = MAX_LENGTH,
        first_burst_length: int = MAX_LENGTH,
        immediate_data: bool = True,
        initial_r2t: bool = False,
        local_address: str | None = None,
        login_timeout: float = 10.0,
        command_timeout: float = 30.0,
        nop_interval: float = 0.0,
        recovery: RecoveryPolicy | None = None,
        connector: Connector | None = None,
    ) -> Session:
        """Connect, log in (RFC 7143 §6) and return the session in full feature phase.

        ``nop_interval`` > 0 sends a NOP-Out ping that often; ``connector`` replaces
        the TCP transport (the test seam).  Raises :class:`LoginError`.
        """
        options = LoginOptions(
            initiator_name=initiator_name,
            target_name=target,
            chap=chap,
            mutual_chap=mutual_chap,
            header_digest=header_digest,
            data_digest=data_digest,
            max_recv_data_segment_length=max_recv_data_segment_length,
            max_burst_length=max_burst_length,
            first_burst_length=first_burst_length,
            immediate_data=immediate_data,
            initial_r2t=initial_r2t,
            timeout=login_timeout,
        )
        session = cls(
            host,
            port,
            options,
            connector=connector or tcp_connect,
            local_address=local_address,
            isid=new_isid(),
            command_timeout=command_timeout,
            nop_interval=nop_interval,
            recovery=recovery or RecoveryPolicy(),
        )
        await session._login()
        # a target reports POWER ON, RESET (29/00) to a new I_T nexus's first command
        # (SAM; ours, LIO): _take_attention() takes it beside the first command
        session.attention_expected = True
        if nop_interval > 0:
            session._nop_task = asyncio.create_task(session._nop_loop())
        return session

    async def _login(self) -> None:
        self.learned.clear()
        transport, relay, result = await connect_and_login(
            self.connector,
            self.host,
            self.port,
            local_address=self.local_address,
            options=self.options,
            isid=self.isid,
        )
        self.transport = transport
        self.params, self.tsih = result.params, result.tsih
        self.exp_statsn = result.exp_statsn
        self.cmdsn = self.exp_cmdsn = result.exp_cmdsn
        self.max_cmdsn = result.max_cmdsn
        relay.to = self

    async def close(self) -> None:
        """Logout (RFC 7143 §11.14) and close the connection; idempotent."""
        if self._closing:
            return
        self._closing = True
        for job in (self._nop_task, self._recovering):
            if job is not None:
                await cancel_and_wait(job)
        if self.transport is not None and self._failed is None:
            with contextlib.suppress(InitiatorError, TimeoutError):
                await self._logout()
        self._fail_all(ConnectionLostError("session closed"))
        if self.transport is not None:
            self.transport.close()

    async def _logout(self) -> None:
        itt = self._next_itt()
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.tmfs[itt] = future
        self._send(P.LogoutRequest(itt=itt, cmdsn=self.cmdsn, immediate=True))
        try:
            await asyncio.wait_for(future, 5.0)
        finally:
            self.tmfs.pop(itt, None)

    @property
    def reusable(self) -> bool:
        """Logged in, connected and idle: no command, ping or task management request
        outstanding, not reconnecting, not failed, not closing (a session that may be
        handed to another user as it is)."""
        return (
            self.transport is not None
            and self._failed is None
            and self._recovering is None
            and not self._closing
            and not (self.tasks or self.waiting or self.tmfs)
        )

    def reuse(self, recovery: RecoveryPolicy | None = None) -> None:
        """Readies an idle session for its next user: its counters from zero and that
        user's recovery policy, and no one told of its unit attentions."""
        self.recovery = recovery or RecoveryPolicy()
        self.reinstatements = 0
        self.reissued_bytes = 0
        self.on_attention = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ------------------------------------------------------------ commands

    async def read(self, lun: int, lba: int, blocks: int, block_size: int = 512) -> bytes:
        """READ(16) of ``blocks`` blocks at ``lba``."""
        reply = await self.scsi(lun, read16(lba, blocks), read_length=blocks * block_size)
        return reply.data

    async def write(self, lun: int, lba: int, data: WriteData, block_size: int = 512) -> None:
        """WRITE(16) of ``data`` (a whole number of blocks) at ``lba``."""
        if len(data) % block_size:
            raise ValueError(f"{len(data)} bytes is not a multiple of {block_size}")
        await self.scsi(lun, write16(lba, len(data) // block_size), data_out=data)

    async def capacity(self, lun: int) -> tuple[int, int]:
        """(number of blocks, block size) from READ CAPACITY(16)."""
        reply = await self.scsi(lun, read_capacity16(), read_length=32)
        last, size = struct.unpack(">QI", reply.data[:12])
        return last + 1, size

    async def scsi(
        self,
        lun: int,
        cdb: bytes,
        data_out: WriteData = b"",
        read_length: int = 0,
        timeout: float | None = None,
    ) -> ScsiReply:
        """Any SCSI command.  Raises :class:`ScsiError` unless the status is GOOD
        (a UNIT ATTENTION is retried a few times first), :class:`CommandTimeout`."""
        if self.attention_expected:
            self._take_attention(lun)
        for _ in range(UNIT_ATTENTION_RETRIES):
            reply = await self._run(lun, cdb, data_out, read_length, timeout)
            if reply.status == STATUS_GOOD:
                return reply
            error = ScsiError(reply.status, reply.sense)
            if not _is_attention(error):
                raise error
            self._heard(lun, error)
        raise error

    def _heard(self, lun: int, attention: ScsiError) -> None:
        if self.on_attention is not None:
            self.on_attention(lun, attention)

    def _take_attention(self, lun: int) -> None:
        """A unit attention is expected (:attr:`attention_expected`): a TEST UNIT READY
        is sent right before the command at hand, in the same round trip, and takes it
        (a target reports it to the first command it runs of the nexus); the command is
        then answered at once instead of with the attention and sent again, a round trip
        later. The TEST UNIT READY's answer is looked at only for the attention it
        took (:attr:`on_attention`)."""
        self.attention_expected = False
        if self._failed is not None:
            return
        future: asyncio.Future[ScsiReply] = asyncio.get_running_loop().create_future()

        def taken(done: asyncio.Future[ScsiReply]) -> None:
            if done.cancelled() or done.exception() is not None:
                return
            error = ScsiError(done.result().status, done.result().sense)
            if _is_attention(error):
                self._heard(lun, error)

        future.add_done_callback(taken)
        self._submit(Task(lun, TEST_UNIT_READY, b"", 0, future))

    async def _run(
        self,
        lun: int,
        cdb: bytes,
        data_out: WriteData,
        read_length: int,
        timeout: float | None,
    ) -> ScsiReply:
        if self._failed is not None:
            raise self._failed
        future: asyncio.Future[ScsiReply] = asyncio.get_running_loop().create_future()
        task = Task(lun, cdb, data_out, read_length, future)
        self._submit(task)
        limit = self.command_timeout if timeout is None else timeout
        try:
            return await asyncio.wait_for(asyncio.shield(future), limit)
        except TimeoutError:
            raise await self._abort(task, limit) from None
        except asyncio.CancelledError:
            # nobody awaits the command any more: the session failing later must not
            # leave "Future exception was never retrieved" in the log
            future.add_done_callback(_retrieve)
            raise

    def _submit(self, task: Task) -> None:
        task.itt = self._next_itt()
        task.reset()
        self.tasks[task.itt] = task
        self.waiting.append(task)
        self._issue()

    def _issue(self) -> None:
        """Send waiting commands while the CmdSN window is open (§4.2.2.1)."""
        if self.transport is None or self._recovering is not None:
            return
        while self.waiting and sn_le(self.cmdsn, self.max_cmdsn):
            task = self.waiting.popleft()
            task.cmdsn = self.cmdsn
            self.cmdsn = (self.cmdsn + 1) & _MASK
            self._send(task.command_pdu(self.params, self.exp_statsn))
            for pdu in unsolicited_pdus(task, self.params, self.exp_statsn):
                self._send(pdu)

    async def _abort(self, task: Task, limit: float) -> CommandTimeout:
        """ABORT TASK (RFC 7143 §11.5.1) for a command that timed out."""
        response: int | None = None
        with contextlib.suppress(ValueError):
            self.waiting.remove(task)
        if task.cmdsn and self.transport is not None and self._recovering is None:
            itt = self._next_itt()
            future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            self.tmfs[itt] = future
            tmf = P.TaskMgmtRequest(
                itt=itt,
                function=P.TmfFunction.ABORT_TASK,
                lun=encode_lun(task.lun),
                ref_task_tag=task.itt,
                cmdsn=self.cmdsn,
                expstatsn=self.exp_statsn,
                ref_cmdsn=task.cmdsn,
                immediate=True,
            )
            self._send(tmf)
            with contextlib.suppress(TimeoutError, InitiatorError):
                response = await asyncio.wait_for(future, limit)
            self.tmfs.pop(itt, None)
        self.tasks.pop(task.itt, None)
        return CommandTimeout(task.itt, limit, response)

    # ------------------------------------------------------------ pings

    async def ping(self, timeout: float = 10.0) -> None:
        """NOP-Out with a fresh ITT; returns when the target's NOP-In arrives (§11.18)."""
        if self._failed is not None:
            raise self._failed
        itt = self._next_itt()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pings[itt] = future
        try:
            self._send(
                P.NopOut(itt=itt, cmdsn=self.cmdsn, expstatsn=self.exp_statsn, immediate=True)
            )
            await asyncio.wait_for(future, timeout)
        finally:
            self.pings.pop(itt, None)

    async def _nop_loop(self) -> None:
        """Ping every ``nop_interval``; a ping that is not answered drops the connection."""
        while True:
            await asyncio.sleep(self.nop_interval)
            if self._recovering is not None or self.transport is None:
                continue
            try:
                await self.ping(timeout=max(self.nop_interval, 1.0))
            except TimeoutError:
                self.transport.drop()
            except InitiatorError:
                return

    # ------------------------------------------------------------ receive

    def pdu_received(self, pdu: P.Pdu) -> None:
        """Dispatch one PDU from the target (called by the transport)."""
        if isinstance(pdu, P._TargetPdu):
            self._sequence(pdu)
        if isinstance(pdu, P.DataIn):
            self._data_in(pdu)
        elif isinstance(pdu, P.ScsiResponse):
            self._finish(pdu.itt, pdu.status, sense_of(pdu))
        elif isinstance(pdu, P.R2T):
            self._r2t(pdu)
        elif isinstance(pdu, P.NopIn):
            self._nop_in(pdu)
        elif isinstance(pdu, P.TaskMgmtResponse | P.LogoutResponse):
            self._resolve(self.tmfs, pdu.itt, pdu.response)
        elif isinstance(pdu, P.AsyncMessage):
            self._async_message(pdu)
        elif isinstance(pdu, P.Reject) and self.transport is not None:
            self.transport.drop()  # ERL 0: a Reject of ours is a protocol failure

    def _sequence(self, pdu: P._TargetPdu) -> None:
        """Track ExpStatSN and the CmdSN window from every target PDU (§4.2.2)."""
        following = _next_statsn(pdu)
        if following is not None and sn_le(self.exp_statsn, following):
            self.exp_statsn = following
        if sn_le(self.max_cmdsn, pdu.maxcmdsn) and sn_le((pdu.expcmdsn - 1) & _MASK, pdu.maxcmdsn):
            opened = pdu.maxcmdsn != self.max_cmdsn
            self.max_cmdsn, self.exp_cmdsn = pdu.maxcmdsn, pdu.expcmdsn
            if opened and self.waiting:
                self._issue()

    def _data_in(self, pdu: P.DataIn) -> None:
        task = self.tasks.get(pdu.itt)
        if task is None:
            return
        if pdu.data:
            task.data_in(pdu)
        if pdu.has_status:
            self._finish(pdu.itt, pdu.status, b"")

    def _finish(self, itt: int, status: int, sense: bytes) -> None:
        task = self.tasks.pop(itt, None)
        if task is None or task.future.done():
            return
        data = task.read_data() if task.read_length else b""
        task.future.set_result(ScsiReply(status, data, sense))

    def _r2t(self, r2t: P.R2T) -> None:
        task = self.tasks.get(r2t.itt)
        if task is None:
            return
        for pdu in solicited_pdus(task, r2t, self.params, self.exp_statsn):
            self._send(pdu)

    def _nop_in(self, pdu: P.NopIn) -> None:
        if pdu.ttt != P.RESERVED_TAG:  # the target pings us: answer (§11.19)
            self._send(
                P.NopOut(
                    itt=P.RESERVED_TAG,
                    ttt=pdu.ttt,
                    lun=pdu.lun,
                    cmdsn=self.cmdsn,
                    expstatsn=self.exp_statsn,
                    immediate=True,
                )
            )
        elif pdu.itt != P.RESERVED_TAG:
            self._resolve(self.pings, pdu.itt, None)

    def _async_message(self, pdu: P.AsyncMessage) -> None:
        """A target's logout request or connection drop notice: reinstate (ERL 0)."""
        drop = pdu.event in (P.AsyncEvent.LOGOUT_REQUEST, P.AsyncEvent.CONNECTION_DROP)
        if drop and self.transport is not None:
            self.transport.drop()

    @staticmethod
    def _resolve(futures: dict[int, asyncio.Future[T]], itt: int, value: T) -> None:
        future = futures.get(itt)
        if future is not None and not future.done():
            future.set_result(value)

    # ------------------------------------------------------------ recovery

    def transport_lost(self, exc: Exception | None) -> None:
        """The connection dropped: reinstate the session unless we are closing."""
        lost = ConnectionLostError(f"connection lost: {exc or 'closed by target'}")
        for futures in (self.pings, self.tmfs):
            for future in futures.values():
                if not future.done():
                    future.set_exception(lost)
        self.transport = None
        if isinstance(exc, P.SpanError):
            self._fail_unsendable(exc)
        if self._closing or self._recovering is not None:
            return
        self.dropped_at = time.monotonic()
        self._recovering = asyncio.get_running_loop().create_task(self._recover())

    def _fail_unsendable(self, exc: P.SpanError) -> None:
        """The writes whose data is a span its file can no longer give (closed, or
        shrunk under it) fail with ``exc`` instead of being sent again."""
        for itt, task in list(self.tasks.items()):
            span = task.data_out
            if isinstance(span, P.FileSpan) and not span.available():
                del self.tasks[itt]
                if task in self.waiting:
                    self.waiting.remove(task)
                if not task.future.done():
                    task.future.set_exception(exc)

    async def _recover(self) -> None:
        """ERL 0 (RFC 7143 §7.1.4.3): log in again with the same ISID and TSIH 0 (which
        reinstates the session), then reissue every unfinished command."""
        delay = self.recovery.first_delay
        for attempt in range(self.recovery.attempts):
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.recovery.max_delay)
            try:
                await self._login()
            except LoginError as exc:
                if exc.status_class == 2 or attempt + 1 == self.recovery.attempts:
                    return self._give_up(exc)
                continue
            except (OSError, TimeoutError) as exc:
                if attempt + 1 == self.recovery.attempts:
                    return self._give_up(exc)
                continue
            return self._reissue()
        return None

    def _reissue(self) -> None:
        self.reinstatements += 1
        self._recovering = None
        pending = sorted(self.tasks.values(), key=lambda t: t.cmdsn if t.cmdsn else 1 << 40)
        self.tasks.clear()
        self.waiting.clear()
        for task in pending:
            if not task.future.done():
                if task.cmdsn:  # it went out on the lost connection
                    self.reissued_bytes += len(task.data_out)
                self._submit(task)

    def _give_up(self, exc: BaseException) -> None:
        self._recovering = None
        self._failed = ConnectionLostError(
            f"session to {self.host}:{self.port} lost and not recovered "
            f"after {self.recovery.attempts} attempts: {exc}"
        )
        self._fail_all(self._failed)

    def _fail_all(self, error: InitiatorError) -> None:
        for task in self.tasks.values():
            if not task.future.done():
                task.future.set_exception(error)
        self.tasks.clear()
        self.waiting.clear()

    # ------------------------------------------------------------ plumbing

    def _next_itt(self) -> int:
        self._itt = (self._itt + 1) & _MASK
        if self._itt == P.RESERVED_TAG:
            self._itt = 1
        return self._itt

    def _send(self, pdu: P.Pdu) -> None:
        if self.transport is not None:
            self.transport.send(pdu)

    def tcp_info(self) -> bytes:
        """Raw TCP_INFO of the connection (empty while reconnecting); not parsed."""
        return self.transport.tcp_info() if self.transport is not None else b""

    @property
    def sends_spans(self) -> bool:
        """Whether a write's data may be a :class:`FileSpan`, sent from its file with
        no copy (a TCP connection without data digests); elsewhere it would be read
        into memory first."""
        transport = self.transport
        return isinstance(transport, TcpTransport) and transport.sends_spans

    def socket(self) -> socket.socket | None:
        """The connection's socket now (another after a reconnect; None meanwhile), to
        set options such as caps on; not to read or write."""
        transport = self.transport
        return transport.socket() if isinstance(transport, TcpTransport) else None
