"""Transfer events: every state change (and, later, every scheduler and equalizer
decision) is a row with its time and a human-readable detail."""

from __future__ import annotations

from sqlalchemy.orm import Session

from reservoir.server.app.tables import Transfer, TransferEvent, utcnow

__all__ = ["record"]


def record(
    session: Session,
    transfer: Transfer,
    kind: str,
    detail: str = "",
    *,
    from_state: str | None = None,
    to_state: str | None = None,
) -> TransferEvent:
    """Adds an event to ``transfer`` (committed with the caller's session)."""
    event = TransferEvent(
        transfer_id=transfer.id,
        at=utcnow(),
        kind=kind,
        from_state=from_state,
        to_state=to_state,
        detail=detail[:4096],
    )
    session.add(event)
    return event
