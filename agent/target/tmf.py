"""Task management functions (RFC 7143 §11.5, SAM-5 §7).

Aborted tasks are cancelled and get no SCSI Response; the TMF response is
sent after they were cancelled.  LOGICAL UNIT RESET and TARGET WARM RESET
also reset the logical units (reservations, unit attentions); TARGET COLD
RESET drops every session of the target after answering.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from reservoir.agent import scsi
from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.pdu import TmfFunction, TmfResponse
from reservoir.agent.iscsi.serial import sn_lt

if TYPE_CHECKING:
    from reservoir.agent.target.connection import Connection
    from reservoir.agent.target.session import Session
    from reservoir.agent.target.tasks import ScsiTask

log = logging.getLogger("reservoir.target")


def handle(conn: Connection, session: Session, req: P.TaskMgmtRequest) -> None:
    fn = req.function
    lun = scsi.LunTable.decode_lun(req.lun)
    log.info("%s: task management %s on LUN %d", conn.peer, _name(fn), lun)
    if fn == TmfFunction.ABORT_TASK:
        response = _abort_task(session, req)
    elif fn in (TmfFunction.ABORT_TASK_SET, TmfFunction.CLEAR_TASK_SET):
        scope = [session] if fn == TmfFunction.ABORT_TASK_SET else _target_sessions(conn, session)
        _abort_all(_tasks_of(scope, lun))
        response = TmfResponse.COMPLETE
    elif fn == TmfFunction.LOGICAL_UNIT_RESET:
        response = _lu_reset(conn, session, lun)
    elif fn in (TmfFunction.TARGET_WARM_RESET, TmfFunction.TARGET_COLD_RESET):
        response = _target_reset(conn, session)
    elif fn == TmfFunction.TASK_REASSIGN:
        response = TmfResponse.NO_REASSIGN
    elif fn == TmfFunction.CLEAR_ACA:
        response = TmfResponse.NOT_SUPPORTED
    else:
        response = TmfResponse.REJECTED
    conn.send(P.TaskMgmtResponse(itt=req.itt, response=response))
    if fn == TmfFunction.TARGET_COLD_RESET:
        for other in _target_sessions(conn, session):
            conn.server.end_session(other, "target cold reset")


def _name(fn: int) -> str:
    try:
        return TmfFunction(fn).name
    except ValueError:
        return f"function {fn}"


def _abort_task(session: Session, req: P.TaskMgmtRequest) -> int:
    task = session.tasks.get(req.ref_task_tag)
    if task is not None:
        task.abort()
        return TmfResponse.COMPLETE
    # RFC 7143 §11.5.1 b): a task not found whose RefCmdSN is inside the window (not
    # received yet) and before this request's is to be "considered received": answer
    # Function complete. A RefCmdSN below ExpCmdSN was received and has completed (its
    # response is sent or on its way): the task does not exist, as libiscsi's
    # AbortTaskSimpleAsync and other targets have it.
    if session.in_window(req.ref_cmdsn) and (sn_lt(req.ref_cmdsn, req.cmdsn) or req.immediate):
        return TmfResponse.COMPLETE
    return TmfResponse.NO_TASK


def _target_sessions(conn: Connection, session: Session) -> list[Session]:
    return conn.server.sessions_of(session.target_name)


def _tasks_of(sessions: Iterable[Session], lun: int | None) -> list[ScsiTask]:
    return [task for s in sessions for task in s.tasks.values() if lun is None or task.lun == lun]


def _abort_all(tasks: list[ScsiTask]) -> None:
    for task in tasks:
        task.abort()


def _lu_reset(conn: Connection, session: Session, lun: int) -> int:
    luns = session.luns
    if luns is None or lun not in luns.units:
        return TmfResponse.NO_LUN
    _abort_all(_tasks_of(_target_sessions(conn, session), lun))
    luns.units[lun].reset(session.nexus)
    return TmfResponse.COMPLETE


def _target_reset(conn: Connection, session: Session) -> int:
    _abort_all(_tasks_of(_target_sessions(conn, session), None))
    if session.luns is not None:
        session.luns.reset_all(session.nexus)
    return TmfResponse.COMPLETE
