"""The login phase of one connection: PDUs in, login responses out, and at
the end a session created (leading login) or joined (MC/S, TSIH != 0).

The key negotiation itself is sans-IO in :mod:`reservoir.agent.iscsi.login`;
this module adds what needs the server: session lookup and reinstatement,
MaxConnections, StatSN/CmdSN, the logs of who logged in and why a login was
refused.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.login import LoginNegotiator, LoginReply, LoginRequestView

if TYPE_CHECKING:
    from reservoir.agent.target.connection import Connection
    from reservoir.agent.target.session import Session

log = logging.getLogger("reservoir.target")

# RFC 7143 §11.13.5 status class/detail used here.
SESSION_DOES_NOT_EXIST = (0x02, 0x0A)
TOO_MANY_CONNECTIONS = (0x02, 0x06)
CANT_INCLUDE_IN_SESSION = (0x02, 0x08)
OUT_OF_RESOURCES = (0x03, 0x02)


class LoginPhase:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.negotiator: LoginNegotiator | None = None
        self.existing: Session | None = None
        self.isid = bytes(6)
        self.tsih = 0
        self.cmdsn = 0

    def handle(self, pdu: P.Pdu) -> None:
        if not isinstance(pdu, P.LoginRequest):
            self.conn.close(f"{type(pdu).__name__} during login")
            return
        if self.negotiator is None and not self._first(pdu):
            return
        assert self.negotiator is not None
        reply = self.negotiator.step(_view(pdu))
        if reply.status_class:
            self._refuse(pdu, reply)
        elif reply.complete:
            self._complete(pdu, reply)
        else:
            self._respond(pdu, reply)

    # ------------------------------------------------------------ first PDU

    def _first(self, pdu: P.LoginRequest) -> bool:
        conn = self.conn
        self.isid, self.tsih, self.cmdsn = pdu.isid, pdu.tsih, pdu.cmdsn
        conn.cid = pdu.cid
        conn.statsn = pdu.expstatsn
        existing = None
        if pdu.tsih:
            existing = conn.server.sessions.get(pdu.tsih)
            if existing is None or existing.isid != pdu.isid:
                self._fail_early(pdu, SESSION_DOES_NOT_EXIST, f"no session TSIH {pdu.tsih:#x}")
                return False
            if existing.is_discovery or (
                len(existing.connections) >= existing.params.max_connections
                and pdu.cid not in existing.connections
            ):
                self._fail_early(pdu, TOO_MANY_CONNECTIONS, "MaxConnections reached")
                return False
        self.existing = existing
        self.negotiator = LoginNegotiator(
            conn.server.directory,
            conn.server.limits,
            portal_tpgt=conn.server.tpgt,
            existing=existing.params if existing else None,
        )
        return True

    def _fail_early(self, pdu: P.LoginRequest, status: tuple[int, int], why: str) -> None:
        log.warning("login from %s refused: %s", self.conn.peer, why)
        response = self._response(pdu, transit=False, csg=pdu.csg, nsg=0)
        response.status_class, response.status_detail = status
        self.conn.send(response)
        self.conn.close("login refused")

    # ------------------------------------------------------------ responses

    def _response(
        self, pdu: P.LoginRequest, *, transit: bool, csg: int, nsg: int
    ) -> P.LoginResponse:
        response = P.LoginResponse(
            itt=pdu.itt, isid=pdu.isid, tsih=self.tsih, transit=transit, csg=csg, nsg=nsg
        )
        if self.existing is not None:
            response.expcmdsn = self.existing.exp_cmdsn
            response.maxcmdsn = self.existing.max_cmdsn
        else:
            response.expcmdsn = pdu.cmdsn
            response.maxcmdsn = (pdu.cmdsn + self.conn.server.queue_depth - 1) & 0xFFFFFFFF
        return response

    def _reply_pdu(self, pdu: P.LoginRequest, reply: LoginReply) -> P.LoginResponse:
        response = self._response(pdu, transit=reply.transit, csg=reply.csg, nsg=reply.nsg)
        response.cont = reply.cont
        response.data = reply.data
        response.status_class = reply.status_class
        response.status_detail = reply.status_detail
        return response

    def _respond(self, pdu: P.LoginRequest, reply: LoginReply) -> None:
        self.conn.send(self._reply_pdu(pdu, reply))

    def _refuse(self, pdu: P.LoginRequest, reply: LoginReply) -> None:
        neg = self.negotiator
        why = (neg.failure_reason if neg else None) or "negotiation failed"
        who = (neg.initiator_name if neg else None) or "unknown initiator"
        log.warning(
            "login of %s from %s refused (status %02x%02x): %s",
            who,
            self.conn.peer,
            reply.status_class,
            reply.status_detail,
            why,
        )
        response = self._reply_pdu(pdu, reply)
        response.tsih = 0
        self.conn.send(response)
        self.conn.close("login refused")

    # ------------------------------------------------------------ completion

    def _complete(self, pdu: P.LoginRequest, reply: LoginReply) -> None:
        neg = self.negotiator
        assert neg is not None
        conn = self.conn
        server = conn.server
        if self.existing is not None:
            session = self.existing
            if neg.initiator_name != session.initiator_name:
                self._fail_early(pdu, CANT_INCLUDE_IN_SESSION, "initiator name differs")
                return
            old = session.connections.get(conn.cid)
            if old is not None:
                old.close("connection reinstated")
        else:
            session = server.create_session(neg, self.isid, self.cmdsn)
            self.tsih = session.tsih
        response = self._reply_pdu(pdu, reply)
        response.tsih = session.tsih
        response.expcmdsn, response.maxcmdsn = session.exp_cmdsn, session.max_cmdsn
        conn.send(response)
        session.add_connection(conn)
        conn.login_complete(session, neg.connection_params)
        log.info(
            "login: %s from %s to %s (session %#x, connection %d of %d%s)",
            session.initiator_name,
            conn.peer,
            session.target_name or "discovery",
            session.tsih,
            len(session.connections),
            session.params.max_connections,
            f", CHAP user {neg.authenticated_user}" if neg.authenticated_user else "",
        )


def _view(pdu: P.LoginRequest) -> LoginRequestView:
    return LoginRequestView(
        transit=pdu.transit,
        cont=pdu.cont,
        csg=pdu.csg,
        nsg=pdu.nsg,
        version_max=pdu.version_max,
        version_min=pdu.version_min,
        isid=pdu.isid,
        tsih=pdu.tsih,
        cid=pdu.cid,
        data=bytes(pdu.data),
    )
