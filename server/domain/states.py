"""The state machine of a transfer.

::

    queued --start--> running --complete--> completed
      |                 |  \\--fail--> failed --resume--> queued
      |                 pause
      pause             v
      \\-------------> paused --resume--> queued
    cancel: from queued, running, paused or failed to cancelled

``completed`` and ``cancelled`` are final. Resuming puts a transfer back in the
queue: the scheduler (``scheduler.py``) starts it again. Users ask for
pause/resume/cancel; start/complete/fail are the scheduler's. A transfer that is not
final holds its destination (no other transfer may write it), so a failed one can
be cancelled to let it go.
"""

from __future__ import annotations

from enum import StrEnum

from reservoir.server.app.models import TransferState
from reservoir.server.domain.errors import TransitionError

__all__ = ["TRANSITIONS", "Action", "TransitionError", "next_state"]

S = TransferState


class Action(StrEnum):
    START = "start"
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    COMPLETE = "complete"
    FAIL = "fail"


TRANSITIONS: dict[Action, dict[TransferState, TransferState]] = {
    Action.START: {S.QUEUED: S.RUNNING},
    Action.PAUSE: {S.QUEUED: S.PAUSED, S.RUNNING: S.PAUSED},
    Action.RESUME: {S.PAUSED: S.QUEUED, S.FAILED: S.QUEUED},
    Action.CANCEL: {
        S.QUEUED: S.CANCELLED,
        S.RUNNING: S.CANCELLED,
        S.PAUSED: S.CANCELLED,
        S.FAILED: S.CANCELLED,
    },
    Action.COMPLETE: {S.RUNNING: S.COMPLETED},
    Action.FAIL: {S.RUNNING: S.FAILED},
}


def next_state(state: TransferState, action: Action) -> TransferState:
    """The state after ``action``; raises :class:`TransitionError` with the reason."""
    allowed = TRANSITIONS[action]
    if state not in allowed:
        sources = ", ".join(s.value for s in allowed)
        raise TransitionError(
            f"cannot {action.value} a transfer that is {state.value} (only from {sources})"
        )
    return allowed[state]
