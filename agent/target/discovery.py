"""Text requests in the full feature phase: SendTargets (RFC 7143 §11.10,
appendix C) with long answers split over continuation responses.

In a discovery session ``SendTargets=All`` lists every target the initiator
may see, with every portal of each (so an initiator can pair its paths with
portals); a target name lists that target.  In a normal session only the
session's own target is reported.  Other keys are answered NotUnderstood:
the target does not renegotiate in the full feature phase.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.text import TextError, encode_text, parse_text

if TYPE_CHECKING:
    from reservoir.agent.target.connection import Connection
    from reservoir.agent.target.session import Session

log = logging.getLogger("reservoir.target")


def handle_text(conn: Connection, session: Session, req: P.TextRequest) -> None:
    if req.ttt != P.RESERVED_TAG:
        _continue(conn, req)
        return
    try:
        pairs = parse_text(bytes(req.data))
    except TextError as exc:
        log.warning("%s: malformed text request: %s", conn.peer, exc)
        conn.send_reject(P.RejectReason.PROTOCOL_ERROR, req.encode_header())
        return
    answer: list[tuple[str, str]] = []
    for key, value in pairs:
        if key == "SendTargets":
            answer += send_targets(conn, session, value)
        else:
            answer.append((key, "NotUnderstood"))
    conn.pending_text = encode_text(answer) if answer else b""
    _continue(conn, req)


def _continue(conn: Connection, req: P.TextRequest) -> None:
    """Send the next slice of the pending answer (the whole one if it fits)."""
    assert conn.conn_params is not None
    limit = conn.conn_params.max_recv_data_segment_length_initiator
    text = conn.pending_text
    chunk, rest = text[:limit], text[limit:]
    conn.pending_text = rest
    response = P.TextResponse(itt=req.itt, lun=req.lun, data=chunk, final=not rest)
    if rest:
        response.cont = True
        response.ttt = conn.new_ttt()
    conn.send(response)


def send_targets(conn: Connection, session: Session, value: str) -> list[tuple[str, str]]:
    server = conn.server
    if session.is_discovery:
        if value == "All":
            names = server.visible_targets(session.initiator_name)
        elif value in server.visible_targets(session.initiator_name):
            names = [value]
        else:
            names = []
    else:
        own = session.target_name or ""
        names = [own] if value in ("", own) else []
    out: list[tuple[str, str]] = []
    for name in names:
        out.append(("TargetName", name))
        for address in server.target_addresses(conn):
            out.append(("TargetAddress", address))
    return out
