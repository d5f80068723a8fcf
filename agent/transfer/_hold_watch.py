"""A destination's hold, watched while the copy writes it.

A persistent reservation lives in the target. A target that restarts without
keeping reservations (APTPL, which ours and most do not set for a copy) comes back
with none: the copy's sessions log in again and go on writing (ERL 0 reinstatement),
and nothing would hold the LUN any more. Another initiator may also CLEAR or PREEMPT
it. Each tells the copy's sessions with a unit attention: POWER ON, RESET (29h) after
a restart, RESERVATIONS PREEMPTED (2Ah/03h) or REGISTRATIONS PREEMPTED (2Ah/05h).
RESERVATIONS RELEASED (2Ah/04h) is not listened to: only the holder releases, and the
holder is the copy itself (_hold.hold_by_registration).

On one of those the LUN's reservations are read again (:class:`HoldWatch`):
- still the copy's: nothing to do;
- nobody's (the target restarted, or a CLEAR): the copy holds it again at once, every
  session registering again and the holder reserving, and the time it was not held
  is reported (:class:`Lapse`): the summary then does not say that no other
  initiator could write meanwhile. What was written stays checked by the end check,
  which hashes the whole destination;
- someone else's: the copy fails (HoldError), keeping its checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from reservoir.agent.initiator import (
    WRITE_EXCLUSIVE_REGISTRANTS_ONLY,
    InitiatorError,
    ScsiError,
    Session,
    pr_register,
    pr_reserve,
)
from reservoir.agent.transfer._hold import RESERVED, HoldError, read_pr_state

log = logging.getLogger("reservoir.copy")

RESET_ASC = 0x29  # POWER ON, RESET, OR BUS DEVICE RESET OCCURRED, and its kin


def shaken_by(attention: ScsiError) -> str | None:
    """What an attention says of the hold, in words; None for one that does not bear
    on it (mode parameters changed, capacity changed, our own release...)."""
    asc, ascq = attention.asc, attention.ascq
    code = f"unit attention {asc:02X}h/{ascq:02X}h"
    if asc == RESET_ASC:
        return f"the target restarted or was reset ({code})"
    if (asc, ascq) == (0x2A, 0x03):
        return f"another initiator cleared or preempted the reservation ({code})"
    if (asc, ascq) == (0x2A, 0x05):
        return f"another initiator preempted the copy's registrations ({code})"
    return None


@dataclass(frozen=True, slots=True)
class Lapse:
    """A time the LUN was not held: from the first attention that said so to the
    copy's hold being back, in seconds since the destination was opened (the copy's
    first milliseconds)."""

    lost: float | None  # None: before this run began (a resumed copy)
    back: float
    why: str

    def describe(self) -> str:
        if self.lost is None:
            return f"not held between the run before and this one ({self.why})"
        return f"not held from {self.lost:.2f} s to {self.back:.2f} s ({self.why})"


class HeldLun(Protocol):
    """The destination a watch is for: how the copy holds it now, read at each
    judgement (``hold`` None: not held), and the session holding its reservation,
    which the watch changes where it reserves again from another."""

    label: str
    hold: int | None
    hold_kind: str
    holder: Session | None


class HoldWatch:
    """Listens to the unit attentions of a held LUN's sessions and judges the hold
    again after one that may have taken it (see the module)."""

    def __init__(self, side: HeldLun, lun: int, began: float) -> None:
        self.side, self.lun, self.began = side, lun, began
        self.lapses: list[Lapse] = []
        self.failure: HoldError | None = None
        # registered under the key, in order, with when it was (or was again)
        self._sessions: dict[Session, float] = {}
        self._heard: tuple[Session, str, float] | None = None  # the first not yet judged
        self._judging: asyncio.Task[None] | None = None

    def watch(self, session: Session) -> None:
        """``session`` is registered under the key: its attentions are listened to."""
        self._sessions.setdefault(session, time.monotonic())
        session.on_attention = partial(self._attention, session)

    async def stop(self) -> None:
        """Listens no more (the copy ends: its own CLEAR would be heard), after the
        judgement under way, if any."""
        for session in self._sessions:
            session.on_attention = None
        self._sessions.clear()
        if self._judging is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._judging

    def unheld_since_last_run(self) -> None:
        """A resumed copy found the LUN unreserved and took it anew: the run before
        held it, and nothing did from some time after until now."""
        why = "found unreserved when this run began: its target restarted, or an initiator "
        why += "cleared or released the reservation"
        self.lapses.append(Lapse(None, time.monotonic() - self.began, why))
        log.warning("%s: not held since the run before: %s", self.side.label, why)

    def check(self) -> None:
        """HoldError if the hold was taken by someone else while the copy ran."""
        if self.failure is not None:
            raise self.failure

    async def settled(self) -> HoldError | None:
        """The hold's failure, once the judgement under way (if any) is done: a write
        refused with RESERVATION CONFLICT is said as the hold taken, where it was."""
        if self._judging is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._judging)
        return self.failure

    def _attention(self, session: Session, lun: int, attention: ScsiError) -> None:
        why = shaken_by(attention)
        if lun != self.lun or why is None or self.side.hold is None or self.failure is not None:
            return
        log.info("%s: %s: its hold is checked again", self.side.label, why)
        if self._heard is None:
            self._heard = (session, why, self._lost_at(session, attention))
        if self._judging is None:
            self._judging = asyncio.get_running_loop().create_task(self._judge_all())

    def _lost_at(self, session: Session, attention: ScsiError) -> float:
        """When the hold may have gone: for a reset heard on a session that logged in
        again since it registered, when its connection dropped (the target may have
        gone then); else now (a CLEAR or PREEMPT comes between two commands)."""
        dropped, registered = session.dropped_at, self._sessions.get(session)
        if attention.asc != RESET_ASC or dropped is None or registered is None:
            return time.monotonic()
        return dropped if dropped > registered else time.monotonic()

    async def _judge_all(self) -> None:
        try:
            while self._heard is not None:
                (session, why, at), self._heard = self._heard, None
                try:
                    await self._judge(session, why, at)
                except (InitiatorError, OSError, TimeoutError) as exc:
                    self._fail(f"its hold could not be checked again after {why}: {exc}")
        finally:
            self._judging = None

    async def _judge(self, session: Session, why: str, at: float) -> None:
        key = self.side.hold
        assert key is not None
        state = await read_pr_state(session, self.lun)
        ours = (key, WRITE_EXCLUSIVE_REGISTRANTS_ONLY)
        if key in state.keys and (self.side.hold_kind != RESERVED or state.reservation == ours):
            log.info("%s: still held under the copy's key (0x%016x)", self.side.label, key)
            return
        others = {k for k in state.keys if k != key}
        if state.reservation is not None and state.reservation[0] != key:
            others.add(state.reservation[0])
        if others:
            listed = ", ".join(f"0x{k:016x}" for k in sorted(others))
            return self._fail(f"its hold was taken by another initiator ({why}; keys {listed})")
        await self._hold_again(key)
        lapse = Lapse(at - self.began, time.monotonic() - self.began, why)
        self.lapses.append(lapse)
        log.warning(
            "%s: %s; held again under the copy's key: other initiators could write it "
            "meanwhile (the end check hashes the whole destination)",
            self.side.label,
            lapse.describe(),
        )

    async def _hold_again(self, key: int) -> None:
        """Every session registers again, then one reserves (a target without the
        reservation lets every registered session write)."""
        sessions = list(self._sessions)
        answers = await asyncio.gather(
            *(pr_register(s, self.lun, key) for s in sessions), return_exceptions=True
        )
        live = [s for s, answer in zip(sessions, answers, strict=True) if answer is None]
        if not live:
            raise next(a for a in answers if isinstance(a, BaseException))
        now = time.monotonic()
        self._sessions.update(dict.fromkeys(live, now))  # a drop before now is counted
        if self.side.hold_kind == RESERVED:
            holder = self.side.holder if self.side.holder in live else live[0]
            await pr_reserve(holder, self.lun, key, WRITE_EXCLUSIVE_REGISTRANTS_ONLY)
            self.side.holder = holder

    def _fail(self, why: str) -> None:
        self.failure = HoldError(f"{self.side.label}: {why}")
        log.error("%s", self.failure)
