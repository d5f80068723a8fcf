"""Transfer events: every state change and scheduler decision is a row with its time
and a human-readable detail, and a line of the coordinator's log (a failure a
warning), so an operator following the service's log sees each transfer's history."""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy.orm import Session

from reservoir.server.app import webhooks
from reservoir.server.app.models import TransferState
from reservoir.server.app.tables import Transfer, TransferEvent, utcnow

__all__ = ["record", "stamp"]

log = logging.getLogger("reservoir.server.transfers")


def record(
    session: Session,
    transfer: Transfer,
    kind: str,
    detail: str = "",
    *,
    from_state: str | None = None,
    to_state: str | None = None,
    warning: bool = False,
) -> TransferEvent:
    """Adds an event to ``transfer`` (committed with the caller's session); a change of
    state also stamps the transfer's times (:func:`stamp`) and, if it ends the transfer,
    queues its webhook deliveries (``webhooks.py``). The log shows it as a warning if
    ``warning`` (something went wrong that the scheduler works around) or if the
    transfer failed."""
    now = utcnow()
    if kind == "state" and to_state is not None:
        stamp(transfer, str(to_state), now)
        webhooks.enqueue(session, transfer, str(to_state))
    event = TransferEvent(
        transfer_id=transfer.id,
        at=now,
        kind=kind,
        from_state=from_state,
        to_state=to_state,
        detail=detail[:4096],
    )
    session.add(event)
    failed = to_state == TransferState.FAILED.value
    level = logging.WARNING if warning or failed else logging.INFO
    change = f"{from_state or '(new)'} -> {to_state}: " if to_state is not None else ""
    log.log(level, "transfer %s: %s%s", transfer.id, change, detail or kind)
    return event


def stamp(transfer: Transfer, state: str, now: datetime) -> None:
    """The times a transfer entering ``state`` keeps: when it first ran, when it last
    began running and its done bytes then (its rate is taken since), when it completed."""
    if state == TransferState.RUNNING.value:
        transfer.started_at = transfer.started_at or now
        transfer.running_since, transfer.running_since_bytes = now, transfer.done_bytes or 0
    elif state == TransferState.COMPLETED.value:
        transfer.completed_at = now
