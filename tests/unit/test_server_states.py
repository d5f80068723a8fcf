"""The transfer state machine: allowed moves and refusals with a clear reason."""

from __future__ import annotations

import pytest

from reservoir.server.app.models import TransferState as S
from reservoir.server.domain.states import Action, TransitionError, next_state


@pytest.mark.parametrize(
    ("state", "action", "after"),
    [
        (S.QUEUED, Action.PAUSE, S.PAUSED),
        (S.RUNNING, Action.PAUSE, S.PAUSED),
        (S.PAUSED, Action.RESUME, S.QUEUED),
        (S.FAILED, Action.RESUME, S.QUEUED),
        (S.QUEUED, Action.CANCEL, S.CANCELLED),
        (S.PAUSED, Action.CANCEL, S.CANCELLED),
        (S.FAILED, Action.CANCEL, S.CANCELLED),  # to let its destination go
        (S.QUEUED, Action.START, S.RUNNING),
        (S.RUNNING, Action.COMPLETE, S.COMPLETED),
        (S.RUNNING, Action.FAIL, S.FAILED),
    ],
)
def test_allowed_transitions(state: S, action: Action, after: S) -> None:
    assert next_state(state, action) == after


@pytest.mark.parametrize("action", list(Action))
@pytest.mark.parametrize("final", [S.COMPLETED, S.CANCELLED])
def test_final_states_refuse_every_action(final: S, action: Action) -> None:
    with pytest.raises(TransitionError):
        next_state(final, action)


def test_refusal_says_what_and_from_where() -> None:
    with pytest.raises(TransitionError) as info:
        next_state(S.QUEUED, Action.RESUME)
    assert str(info.value) == "cannot resume a transfer that is queued (only from paused, failed)"
