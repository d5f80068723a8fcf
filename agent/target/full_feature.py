"""Full feature phase on the target: what each PDU from the initiator does.

:func:`handle` sees every PDU as it arrives (validation, Data-Out, NOP-Out
answers to our pings, queuing through the session's CmdSN window);
:func:`deliver` runs commands in CmdSN order.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from reservoir.agent import scsi
from reservoir.agent.iscsi import pdu as P
from reservoir.agent.target import discovery, eager, tmf
from reservoir.agent.target.counts import READ, WRITE, kind_of
from reservoir.agent.target.tasks import DataOutError, ScsiTask

if TYPE_CHECKING:
    from reservoir.agent.target.connection import Connection
    from reservoir.agent.target.session import Session

log = logging.getLogger("reservoir.target")

_DISCOVERY_OPCODES = frozenset({P.Opcode.TEXT_REQUEST, P.Opcode.LOGOUT_REQUEST, P.Opcode.NOP_OUT})


def handle(conn: Connection, pdu: P.Pdu) -> None:
    session = conn.session
    assert session is not None
    if session.is_discovery and pdu.OPCODE not in _DISCOVERY_OPCODES:
        _reject(conn, pdu, P.RejectReason.PROTOCOL_ERROR, "not allowed in a discovery session")
        return
    if isinstance(pdu, P.ScsiCommand):
        _accept_command(conn, session, pdu)
    elif isinstance(pdu, P.DataOut):
        _data_out(conn, pdu)
    elif isinstance(pdu, P.NopOut):
        _nop_out(conn, session, pdu)
    elif isinstance(pdu, P.TaskMgmtRequest | P.TextRequest | P.LogoutRequest):
        session.admit(conn, pdu, pdu.cmdsn)
    elif isinstance(pdu, P.SnackRequest):
        _reject(conn, pdu, P.RejectReason.SNACK_REJECT, "SNACK at ErrorRecoveryLevel 0")
    else:
        _reject(conn, pdu, P.RejectReason.PROTOCOL_ERROR, f"{type(pdu).__name__} unexpected")


def deliver(conn: Connection, pdu: P.Pdu) -> None:
    session = conn.session
    if session is None or conn.closed:
        return
    if isinstance(pdu, P.ScsiCommand):
        _start_command(conn, pdu)
    elif isinstance(pdu, P.NopOut):
        conn.send(P.NopIn(itt=pdu.itt, lun=pdu.lun, data=pdu.data))
    elif isinstance(pdu, P.TaskMgmtRequest):
        tmf.handle(conn, session, pdu)
    elif isinstance(pdu, P.TextRequest):
        discovery.handle_text(conn, session, pdu)
    elif isinstance(pdu, P.LogoutRequest):
        _logout(conn, session, pdu)


def _reject(conn: Connection, pdu: P.Pdu, reason: int, why: str) -> None:
    log.warning("%s: rejected %s (ITT %#x): %s", conn.peer, type(pdu).__name__, pdu.itt, why)
    conn.send_reject(reason, pdu.encode_header())
    conn.server.buffers.give(pdu.data)  # refused write data: its buffer goes back


# ---------------------------------------------------------------- SCSI commands


def _command_error(conn: Connection, cmd: P.ScsiCommand) -> str | None:
    """Why a SCSI Command PDU is not acceptable, or None."""
    params = conn.session_params
    data_len = len(cmd.data)
    if data_len and not cmd.write:
        return "immediate data without the W bit"
    if data_len and not params.immediate_data:
        return "immediate data while ImmediateData=No"
    if data_len > params.first_burst_length or data_len > cmd.expected_length:
        return f"{data_len} bytes of immediate data exceed FirstBurstLength/EDTL"
    if not cmd.final and (params.initial_r2t or not cmd.write):
        return "F=0 (unsolicited Data-Out follows) while InitialR2T=Yes or not a write"
    if cmd.itt == P.RESERVED_TAG:
        return "reserved ITT 0xffffffff"
    return None


def _accept_command(conn: Connection, session: Session, cmd: P.ScsiCommand) -> None:
    why = _command_error(conn, cmd)
    if why is not None:
        _reject(conn, cmd, P.RejectReason.PROTOCOL_ERROR, why)
        return
    if cmd.itt in session.tasks:
        _reject(conn, cmd, P.RejectReason.TASK_IN_PROGRESS, "ITT already in use")
        return
    if cmd.itt in conn.failed_itts:
        conn.failed_itts.remove(cmd.itt)
    if session.counts is not None:
        session.counts.commands[kind_of(cmd.cdb)] += 1
    lun = scsi.decode_lun(cmd.lun)
    if cmd.read and not cmd.write and _read_at_once(conn, session, cmd, lun):
        return
    task = ScsiTask(conn, cmd, lun)
    if cmd.write:
        unsolicited_end = len(cmd.data)
        if not cmd.final:
            unsolicited_end = min(conn.session_params.first_burst_length, cmd.expected_length)
        task.take_immediate(unsolicited_end)
    session.tasks[cmd.itt] = task
    conn.tasks[cmd.itt] = task
    session.admit(conn, cmd, cmd.cmdsn)


def _read_at_once(conn: Connection, session: Session, cmd: P.ScsiCommand, lun: int) -> bool:
    """The hot path of small reads: a plain READ that is next in CmdSN order, with
    nothing ahead of it, whose data the page cache holds, is answered right here
    (no task, no coroutine).  Anything else takes the ordinary path."""
    luns, nexus = session.luns, session.nexus
    if luns is None or nexus is None or cmd.attr != P.TaskAttr.SIMPLE:
        return False
    unit = luns.units.get(lun)
    if unit is None or session.tasks or not session.ordering.open_to_simple:
        return False
    expected = cmd.expected_length
    if not _one_pdu(conn, expected) or cmd.cmdsn != session.exp_cmdsn:
        return False
    data = unit.read_cached(nexus, cmd.cdb)
    if data is None or len(data) != expected or not session.take_next(cmd, cmd.cmdsn):
        return False
    conn.send_read_data(cmd.itt, cmd.lun, memoryview(data), 0, 0)
    if session.counts is not None:
        session.counts.read_bytes += expected
    return True


def _start_command(conn: Connection, cmd: P.ScsiCommand) -> None:
    task = conn.tasks.get(cmd.itt)
    if task is None or task.aborted or conn.session is None:
        return
    ordering = conn.session.ordering
    task.runner = eager.start(_run(conn, task, ordering.waits(cmd.attr)))
    if task.runner is not None:
        ordering.track(cmd.attr, task.runner.task)


async def _run(conn: Connection, task: ScsiTask, waits: list[asyncio.Future[None]]) -> None:
    session = conn.session
    assert session is not None and session.luns is not None and session.nexus is not None
    try:
        if waits:
            await asyncio.wait(waits)
        if task.expected_out:
            await task.receive_data()
        command = scsi.ScsiCommand(
            cdb=task.cmd.cdb,
            nexus=session.nexus,
            data_out=memoryview(task.buffer),
            expected_in=task.cmd.expected_length if task.cmd.read else 0,
            task_attr=task.cmd.attr,
        )
        result = await session.luns.execute(task.lun, command)
        task.release_buffer()  # the write is done with it
        if not task.aborted:
            _send_result(conn, task, result)
            await conn.drain()
    except asyncio.CancelledError:
        log.info("%s: task ITT %#x aborted", conn.peer, task.itt)
    finally:
        task.release_buffer()  # storage holds no buffer past a cancellation
        _forget(conn, session, task)


def _forget(conn: Connection, session: Session, task: ScsiTask) -> None:
    if session.tasks.get(task.itt) is task:
        del session.tasks[task.itt]
    if conn.tasks.get(task.itt) is task:
        del conn.tasks[task.itt]


def _data_out(conn: Connection, pdu: P.DataOut) -> None:
    task = conn.tasks.get(pdu.itt)
    if task is None:
        if pdu.itt not in conn.failed_itts:  # stragglers of a failed write are dropped
            _reject(conn, pdu, P.RejectReason.INVALID_PDU_FIELD, "Data-Out for an unknown task")
        return
    try:
        task.on_data_out(pdu)
    except DataOutError as exc:
        _reject(conn, pdu, P.RejectReason.PROTOCOL_ERROR, str(exc))
        _fail_task(conn, task, exc.ascq)
    finally:
        conn.server.buffers.give(pdu.data)  # copied into the task's buffer, or refused


def _fail_task(conn: Connection, task: ScsiTask, ascq: int) -> None:
    """End a write whose Data-Out went wrong: ABORTED COMMAND, DATA PHASE ERROR family."""
    task.abort()
    if conn.session is not None:
        _forget(conn, conn.session, task)
    conn.failed_itts.append(task.itt)
    sense = scsi.build_sense(scsi.SenseKey.ABORTED_COMMAND, 0x4B, ascq)
    response = P.ScsiResponse(itt=task.itt, status=scsi.Status.CHECK_CONDITION)
    response.data = len(sense).to_bytes(2, "big") + sense
    conn.send(response)


def _send_result(conn: Connection, task: ScsiTask, result: scsi.ScsiResult) -> None:
    """Data-In (status collapsed into the last one when GOOD), else a SCSI Response."""
    cmd = task.cmd
    if result.status:
        _log_refusal(conn, task, result)
    if cmd.write and not cmd.read:
        _send_write_status(conn, task, result)
        return
    wanted = len(result.data_in)
    expected = cmd.expected_length if cmd.read else 0
    sent = min(wanted, expected)
    counts = conn.session.counts if conn.session is not None else None
    if counts is not None and kind_of(cmd.cdb) == READ:
        counts.read_bytes += sent
    collapse = result.status == 0 and not result.sense
    if collapse and sent and sent == wanted == expected and _one_pdu(conn, sent):
        conn.send_read_data(cmd.itt, cmd.lun, memoryview(result.data_in), 0, 0)
        return
    pdus = 0
    if sent:
        pdus = _send_data_in(conn, task, memoryview(result.data_in)[:sent], collapse, wanted)
        if collapse:
            return
    response = P.ScsiResponse(itt=cmd.itt, status=result.status, expdatasn=pdus)
    _set_residual(response, expected, wanted)
    if result.sense:
        response.data = len(result.sense).to_bytes(2, "big") + result.sense
    conn.send(response)


OUT_OF_SPACE = (scsi.SenseKey.DATA_PROTECT, 0x27, 0x07)  # SPACE ALLOCATION FAILED WRITE PROTECT


def _log_refusal(conn: Connection, task: ScsiTask, result: scsi.ScsiResult) -> None:
    """Say why a command did not succeed (unit attentions only at debug level)."""
    opcode = task.cmd.cdb[0] if task.cmd.cdb else -1
    what = f"{conn.peer}: LUN {task.lun} opcode {opcode:#04x} (ITT {task.itt:#x})"
    if not result.sense:
        log.info("%s: status %#04x", what, result.status)
        return
    try:
        key, asc, ascq = scsi.decode_sense(result.sense)
    except ValueError:
        key, asc, ascq = -1, -1, -1
    if (key, asc, ascq) == OUT_OF_SPACE:
        log.error("%s: out of space: the LUN's backing volume is full", what)
        return
    level = logging.DEBUG if key == scsi.SenseKey.UNIT_ATTENTION else logging.INFO
    log.log(level, "%s: CHECK CONDITION, sense key %#x ASC/ASCQ %02x/%02x", what, key, asc, ascq)


def _send_write_status(conn: Connection, task: ScsiTask, result: scsi.ScsiResult) -> None:
    """A write's SCSI Response; the residual compares the Data-Out the CDB asked
    for with the Expected Data Transfer Length (RFC 7143 §11.4.5)."""
    session = conn.session
    assert session is not None and session.luns is not None
    cmd = task.cmd
    response = P.ScsiResponse(itt=cmd.itt, status=result.status)
    wanted = session.luns.data_out_length(task.lun, cmd.cdb)
    _set_residual(response, cmd.expected_length, wanted)
    counts = session.counts
    if counts is not None and result.status == scsi.Status.GOOD and kind_of(cmd.cdb) == WRITE:
        counts.written_bytes += min(wanted, cmd.expected_length)
    if result.sense:
        response.data = len(result.sense).to_bytes(2, "big") + result.sense
    conn.send(response)


def _one_pdu(conn: Connection, length: int) -> bool:
    params = conn.conn_params
    assert params is not None
    return length <= params.max_recv_data_segment_length_initiator


def _set_residual(pdu: P.ScsiResponse | P.DataIn, expected: int, wanted: int) -> None:
    if wanted < expected:
        pdu.underflow, pdu.residual = True, expected - wanted
    elif wanted > expected:
        pdu.overflow, pdu.residual = True, wanted - expected


def _send_data_in(
    conn: Connection, task: ScsiTask, data: memoryview, collapse: bool, wanted: int
) -> int:
    """Data-In PDUs of at most MaxRecvDataSegmentLength, F=1 at the end of each
    MaxBurstLength sequence; the last one carries the status when ``collapse``.
    Returns the number of PDUs sent."""
    assert conn.conn_params is not None
    mrdsl = conn.conn_params.max_recv_data_segment_length_initiator
    burst = conn.session_params.max_burst_length
    itt, lun = task.itt, task.cmd.lun
    datasn = 0
    total = len(data)
    for start in range(0, total, burst):
        end = min(start + burst, total)
        for off in range(start, end, mrdsl):
            last = min(off + mrdsl, end)
            pdu = P.DataIn(itt=itt, lun=lun, datasn=datasn, offset=off, data=data[off:last])
            pdu.final = last == end
            if collapse and last == total:
                pdu.has_status = True
                _set_residual(pdu, task.cmd.expected_length, wanted)
            conn.send(pdu, status=pdu.has_status)
            datasn += 1
    return datasn


# ---------------------------------------------------------------- NOP, logout


def _nop_out(conn: Connection, session: Session, pdu: P.NopOut) -> None:
    if pdu.itt != P.RESERVED_TAG:
        session.admit(conn, pdu, pdu.cmdsn)
    elif pdu.ttt != P.RESERVED_TAG and not conn.nop_answered(pdu.ttt):
        log.debug("%s: NOP-Out answers unknown ping %#x", conn.peer, pdu.ttt)


def _logout(conn: Connection, session: Session, pdu: P.LogoutRequest) -> None:
    response = P.LogoutResponse(itt=pdu.itt)
    response.time2wait = session.params.default_time2wait
    response.time2retain = session.params.default_time2retain
    reason = pdu.reason
    log.info("%s: logout (reason %d) of session %#x", conn.peer, reason, session.tsih)
    if reason == P.LogoutReason.CLOSE_SESSION:
        conn.send(response)
        conn.server.end_session(session, "logout")
    elif reason == P.LogoutReason.CLOSE_CONNECTION:
        _logout_connection(conn, session, pdu.cid, response)
    else:
        response.response = P.LogoutResponseCode.RECOVERY_NOT_SUPPORTED
        conn.send(response)


def _logout_connection(
    conn: Connection, session: Session, cid: int, response: P.LogoutResponse
) -> None:
    other = session.connections.get(cid)
    if other is None:
        response.response = P.LogoutResponseCode.CID_NOT_FOUND
        conn.send(response)
        return
    conn.send(response)
    other.close("logout")
