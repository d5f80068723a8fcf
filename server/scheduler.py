"""The seam between the API and whatever runs transfers on the agents.

The routes call a :class:`Scheduler` after every user action on a transfer, inside
the request's database transaction. The real scheduler (issue 4, later) starts
each leg on its source agent through the agent's control API (``POST /copies``),
tracks progress, drives ``start``/``complete``/``fail`` (``states.py``) and
recovers after restarts; the equalizer and the pacing plan hang off it too.

:class:`NoopScheduler` is what this version ships: it starts nothing and only
records, as an event, that nothing was started. Transfers stay ``queued``.
"""

from __future__ import annotations

from typing import Protocol

from sqlalchemy.orm import Session

from reservoir.server import events
from reservoir.server.tables import Transfer

__all__ = ["NoopScheduler", "Scheduler"]


class Scheduler(Protocol):
    def created(self, session: Session, transfer: Transfer) -> None:
        """A transfer was created (state ``queued``, legs computed)."""

    def paused(self, session: Session, transfer: Transfer) -> None:
        """A transfer was paused: stop its legs, keep their checkpoints."""

    def resumed(self, session: Session, transfer: Transfer) -> None:
        """A paused or failed transfer is queued again: restart it from its checkpoints."""

    def cancelled(self, session: Session, transfer: Transfer) -> None:
        """A transfer was cancelled: stop its legs for good."""


class NoopScheduler:
    """Runs nothing; records an event per call so the seam is visible in the history."""

    NOTE = "no scheduler in this version: legs are not started on the agents"

    def _note(self, session: Session, transfer: Transfer, what: str) -> None:
        events.record(session, transfer, "scheduler", f"{what}: {self.NOTE}")

    def created(self, session: Session, transfer: Transfer) -> None:
        self._note(session, transfer, "created")

    def paused(self, session: Session, transfer: Transfer) -> None:
        self._note(session, transfer, "paused")

    def resumed(self, session: Session, transfer: Transfer) -> None:
        self._note(session, transfer, "resumed")

    def cancelled(self, session: Session, transfer: Transfer) -> None:
        self._note(session, transfer, "cancelled")
