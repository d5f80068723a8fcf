"""Copies that failed for a side that could not be reached are resumed by the
scheduler, not left to a user: a destination agent rebooting, a target restarted, a
link down for a minute. The agent marks such a failure ``retryable`` (its engine's
``RemoteUnreachableError``: a refused or timed-out connection, every stream's session
lost and not recovered); anything else (a hold another initiator took, a source that
changed, a wrong IQN) still fails the transfer at once.

A copy's *streak* of failures starts at its first retryable failure and lasts while
it gets no further (its done bytes do not grow). The scheduler resumes it after
FIRST_DELAY seconds, then after twice as long each time up to MAX_DELAY, until the
streak is ``retry_for`` seconds old (the coordinator's ``leg_retry_seconds``); then
the transfer fails with the copy's error, as before, for a user to resume. A copy
that got further before failing again starts a new streak."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["FIRST_DELAY", "MAX_DELAY", "Retries", "Retry", "Step"]

FIRST_DELAY = 2.0  # s before the first resume of a streak
MAX_DELAY = 60.0  # s between resumes at most


class Step(Enum):
    """What the scheduler does with a failed, retryable copy on this pass."""

    BEGIN = "begin"  # its first failure of a streak: say so, resume it after FIRST_DELAY
    WAIT = "wait"  # its next resume is not due yet
    RESUME = "resume"  # resume it now
    GIVE_UP = "give up"  # the streak is older than retry_for: fail the transfer


@dataclass
class Retry:
    """One copy's streak of retryable failures."""

    since: float  # when the streak's first failure was seen (monotonic s)
    done: int  # the copy's done bytes then: more later is a new streak
    attempts: int = 0  # resumes so far
    next_at: float = 0.0  # when the next resume is due

    def delay(self) -> float:
        """Seconds from a resume (or the first failure) to the next one."""
        return float(min(MAX_DELAY, FIRST_DELAY * 2**self.attempts))


class Retries:
    """The streaks of the copies the scheduler is retrying, by copy id."""

    def __init__(self, retry_for: float) -> None:
        self.retry_for = retry_for  # 0: never retried, a failure fails the transfer
        self._streaks: dict[str, Retry] = {}

    def step(self, copy_id: str, done: int, now: float) -> tuple[Step, Retry]:
        """What to do with copy ``copy_id``, failed retryably with ``done`` bytes done."""
        streak = self._streaks.get(copy_id)
        if streak is None or done > streak.done:
            streak = Retry(since=now, done=done)
            streak.next_at = now + streak.delay()
            self._streaks[copy_id] = streak
            if self.retry_for > 0:
                return Step.BEGIN, streak
        if now - streak.since >= self.retry_for:
            del self._streaks[copy_id]
            return Step.GIVE_UP, streak
        if now < streak.next_at:
            return Step.WAIT, streak
        streak.attempts += 1
        streak.next_at = now + streak.delay()
        return Step.RESUME, streak

    def forget(self, copy_id: str) -> None:
        """The copy completed, or a user stopped its transfer: its streak ends."""
        self._streaks.pop(copy_id, None)

    def __contains__(self, copy_id: object) -> bool:
        return copy_id in self._streaks
