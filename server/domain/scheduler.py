"""The seam between the API and whatever runs transfers on the agents, and the
scheduler that runs them (design.md 3.1, issue 4).

The routes call a :class:`Scheduler` after every user action on a transfer, inside
the request's database transaction: ``check`` before a transfer is stored (a 422
refuses it), then ``created``/``paused``/``resumed``/``cancelled``.

:class:`AgentScheduler` is a reconciler. The database holds what should be (the
transfer's state, set by users and by the scheduler through ``states.py``); the
agents hold what is (their copies). Every second (at once after a user action, and
as soon as an agent says one of its copies changed state) one pass,
:meth:`AgentScheduler.tick`, compares the two for each transfer that needs it and
acts through the agents' control API (``agent_client.py``), one agent copy per
source member (``leg_copies.py``). For each copy under way the scheduler keeps one
request waiting on its agent (``GET /copies/{id}?while_state=&wait=``), which the
agent answers when the copy's state changes: a copy's end reaches its transfer, its
webhooks and the dashboard within a round trip, not at the next poll.

==========  =====================================================================
transfer    what a pass does for each copy not completed
==========  =====================================================================
queued      create it (idempotent: the id is chosen here) or resume it if the
            agent has it paused or failed; ``start`` once every copy runs
running     poll state and progress; a copy the agent has paused (the agent
            restarted) is resumed, one it lost is created again under its id (it
            resumes from the agent's checkpoint); completed -> legs completed,
            all completed -> ``complete``; failed for a side it could not reach
            -> resumed after a while, for up to ``leg_retry_seconds``
            (``leg_retry.py``); failed otherwise, or for longer -> ``fail`` with
            the agent's error
paused      pause copies that still run (their checkpoints stay)
failed      same as paused: the other legs stop, ready for a resume
cancelled   cancel copies that are not final
==========  =====================================================================

No database session is held across a call to an agent: a pass reads a snapshot,
calls the agents, then applies what they answered in a new session, where a state
a user changed meanwhile wins (the next pass acts on it). An agent that does not
answer leaves its legs as they are, with one ``waiting for agent`` event, and is
tried again on the next pass. After a coordinator restart the first pass is the
recovery: copies that still run are polled, completed legs are never started again.

:class:`NoopScheduler` runs nothing (``reservoir server --scheduler off``, and tests
of the API alone): it records, as an event, that nothing was started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import event as sa_event
from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from reservoir.common.aio import wait_event
from reservoir.server.app import events, leg_summary
from reservoir.server.app.agent_client import (
    AgentClient,
    AgentError,
    AgentRefusedError,
    AgentUnreachableError,
)
from reservoir.server.app.errors import InvalidRequestError
from reservoir.server.app.models import TransferState
from reservoir.server.app.tables import Transfer, TransferLeg, utcnow
from reservoir.server.domain.leg_copies import CopyPlan, VolumeError, plan_transfer
from reservoir.server.domain.leg_retry import Retries, Step
from reservoir.server.domain.states import Action, TransitionError, next_state

__all__ = ["POLL_INTERVAL", "AgentScheduler", "NoopScheduler", "Scheduler"]

log = logging.getLogger("reservoir.server")

POLL_INTERVAL = 1.0  # seconds between passes
RETRY_FOR = 900.0  # s a copy failing for a side it cannot reach is resumed (leg_retry.py)
WATCH_S = 30.0  # how long one watch of a copy waits on its agent for a change
WATCH_LIMIT = 32
"""Copies watched at once: each watch holds one of the agent client's connections (100
at most) for up to WATCH_S, so beyond this the other copies are found by the passes."""
S = TransferState
Json = dict[str, Any]
COPY_ACTIVE = frozenset({"queued", "running"})
COPY_LIVE = COPY_ACTIVE | {"paused"}
COPY_HOLDING = COPY_LIVE | {"failed"}  # may still hold its destination: a cancel releases it
COMPLETED = S.COMPLETED.value


class Scheduler(Protocol):
    def check(self, session: Session, transfer: Transfer) -> None:
        """Raises ``InvalidRequestError`` if the transfer cannot be run (before it is stored)."""

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

    def check(self, session: Session, transfer: Transfer) -> None:
        return None

    def created(self, session: Session, transfer: Transfer) -> None:
        self._note(session, transfer, "created")

    def paused(self, session: Session, transfer: Transfer) -> None:
        self._note(session, transfer, "paused")

    def resumed(self, session: Session, transfer: Transfer) -> None:
        self._note(session, transfer, "resumed")

    def cancelled(self, session: Session, transfer: Transfer) -> None:
        self._note(session, transfer, "cancelled")


# ---------------------------------------------------------------- one pass


@dataclass
class Outcome:
    """What the agent said of one copy during a pass."""

    plan: CopyPlan
    copy: Json | None = None  # the agent's copy, as last seen
    waiting: str | None = None  # the agent did not answer
    error: str | None = None  # the copy cannot go on (failed, refused)
    retrying: bool = False  # it failed for a side it could not reach: resumed in a while
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # notes the log shows as warnings


@dataclass
class View:
    """A transfer as a pass found it: its state and the copies still to look at."""

    id: str
    state: str
    plans: list[CopyPlan]
    error: str | None = None  # the copies could not be planned


def _needs_work() -> Any:
    """Transfers a pass looks at: queued or running, or with copies left to stop."""
    stop = select(TransferLeg.transfer_id).where(TransferLeg.copy_state.in_(COPY_ACTIVE))
    cancel = select(TransferLeg.transfer_id).where(TransferLeg.copy_state.in_(COPY_HOLDING))
    return select(Transfer).where(
        or_(
            Transfer.state.in_((S.QUEUED.value, S.RUNNING.value)),
            Transfer.state.in_((S.PAUSED.value, S.FAILED.value)) & Transfer.id.in_(stop),
            (Transfer.state == S.CANCELLED.value) & Transfer.id.in_(cancel),
        )
    )


def _view(session: Session, transfer: Transfer) -> View:
    done = {leg.id for leg in transfer.legs if leg.state == COMPLETED}
    try:
        plans = plan_transfer(session, transfer)
    except VolumeError as exc:
        return View(transfer.id, transfer.state, [], str(exc))
    todo = [p for p in plans if not set(p.leg_ids) <= done]
    return View(transfer.id, transfer.state, todo)


def _progress(copy: Json) -> int:
    progress = copy.get("progress") or {}
    return int(progress.get("done_bytes", 0))


def _under_way(out: Outcome) -> bool:
    return out.copy is not None and out.copy["state"] in COPY_ACTIVE | {COMPLETED}


def _summary_line(summary: Json | None) -> str:
    """What a leg's completed event says of its copy: verified or not, what the
    checkpoint spared and what went twice, and when its destination was not held."""
    if not summary:
        return ""
    line = (
        f", {leg_summary.verified_words(summary)}: "
        f"skipped {summary.get('skipped_extents', 0)} extents "
        f"({summary.get('skipped_bytes', 0)} bytes) from the checkpoint, "
        f"resent {summary.get('resent_bytes', 0)} bytes"
    )
    lapses = leg_summary.lapse_warning(summary)
    return f"{line}; {lapses}" if lapses else line


class AgentScheduler:
    """Starts, watches, stops and recovers the legs of transfers on their agents."""

    def __init__(
        self,
        sessions: sessionmaker[Session] | None,
        client: AgentClient,
        *,
        interval: float = POLL_INTERVAL,
        retry_for: float = RETRY_FOR,
    ) -> None:
        self.sessions = sessions
        self.client = client
        self.interval = interval
        self.retries = Retries(retry_for)  # copies failed for a side they could not reach
        self._waiting: set[tuple[str, str]] = set()  # (transfer, agent) not answering
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._watches: dict[tuple[str, str], asyncio.Task[None]] = {}  # (agent, copy)

    # ------------------------------------------------------------ the hooks

    def check(self, session: Session, transfer: Transfer) -> None:
        try:
            plan_transfer(session, transfer)
        except VolumeError as exc:
            raise InvalidRequestError(("destination",), str(exc)) from None

    def _hook(self, session: Session, transfer: Transfer, what: str) -> None:
        """Records ``what`` and runs a pass once the change is committed: a pass that
        starts before the commit does not see it, and the next one is a whole
        interval later."""
        events.record(session, transfer, "scheduler", what)
        sa_event.listen(session, "after_commit", lambda _: self.wake(), once=True)

    def created(self, session: Session, transfer: Transfer) -> None:
        self._hook(session, transfer, "queued: its copies start on the source agents")

    def paused(self, session: Session, transfer: Transfer) -> None:
        self._hook(session, transfer, "pausing its copies on the agents (checkpoints kept)")

    def resumed(self, session: Session, transfer: Transfer) -> None:
        self._hook(session, transfer, "resuming its copies from their checkpoints")

    def cancelled(self, session: Session, transfer: Transfer) -> None:
        self._hook(session, transfer, "cancelling its copies on the agents")

    def wake(self) -> None:
        """Runs a pass soon (safe from any thread; a no-op while stopped)."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(wake.set)

    # ------------------------------------------------------------ the loop

    async def start(self, sessions: sessionmaker[Session] | None = None) -> None:
        if sessions is not None:
            self.sessions = sessions
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._note_restart()
        self._task = self._loop.create_task(self._run(), name="reservoir-scheduler")

    def _note_restart(self) -> None:
        """Transfers under way when the coordinator (re)starts get an event saying so:
        the outage shows in their history, and the first pass picks them up."""
        if self.sessions is None:
            return
        with self.sessions() as session:
            under_way = session.scalars(
                select(Transfer).where(Transfer.state.in_(("running", "paused")))
            ).all()
            for transfer in under_way:
                events.record(
                    session, transfer, "scheduler", "coordinator started: following its copies"
                )
            session.commit()

    async def stop(self) -> None:
        """Stops the loop; the agents' copies keep running (a restart picks them up)."""
        task, self._task = self._task, None
        self._loop = None
        watches, self._watches = list(self._watches.values()), {}
        for running in [*watches, *([task] if task is not None else [])]:
            running.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.client.aclose()

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            try:
                await self.tick()
            except Exception:  # a pass must never end the loop
                log.exception("scheduler pass failed")
            await wait_event(self._wake, self.interval)  # (wait_for could lose a stop)
            self._wake.clear()

    async def tick(self) -> None:
        """One pass over every transfer that needs one."""
        assert self.sessions is not None, "start() the scheduler with the sessions first"
        with self.sessions() as session:
            views = [_view(session, t) for t in session.scalars(_needs_work()).all()]
        for view in views:
            outcomes = await asyncio.gather(*(self._visit(view.state, p) for p in view.plans))
            with self.sessions() as session:
                self._apply(session, view, list(outcomes))
                session.commit()

    # ------------------------------------------------------------ talking to agents

    async def _visit(self, state: str, plan: CopyPlan) -> Outcome:
        out = Outcome(plan)
        try:
            out.copy = await self.client.get_copy(plan.agent, plan.copy_id)
            if state in (S.QUEUED.value, S.RUNNING.value):
                await self._drive(state, out)
                self._watch(plan, out.copy)
            else:
                await self._stop(state, out)
        except AgentUnreachableError as exc:
            out.waiting = str(exc)
        except AgentRefusedError as exc:
            out.warnings.append(f"copy {plan.copy_id} on agent {plan.agent.name!r}: {exc}")
            if out.copy is None:  # refused to create it: it cannot run as asked
                out.error = str(exc)
        except AgentError as exc:  # defensive: the tree has no other leaves
            out.waiting = str(exc)
        return out

    def _watch(self, plan: CopyPlan, copy: Json | None) -> None:
        """Waits on the agent for the copy to leave its state (one request at a time,
        WATCH_S long), and runs a pass as soon as it does: a copy's end reaches the
        transfer then, not at the next poll."""
        key = (plan.agent.id, plan.copy_id)
        if copy is None or copy["state"] not in COPY_ACTIVE or key in self._watches:
            return
        if len(self._watches) >= WATCH_LIMIT:
            return
        watch = asyncio.create_task(self._watched(plan, copy["state"]), name="copy-watch")
        self._watches[key] = watch
        watch.add_done_callback(lambda _: self._watches.pop(key, None))

    async def _watched(self, plan: CopyPlan, state: str) -> None:
        try:
            copy = await self.client.wait_copy(plan.agent, plan.copy_id, state, WATCH_S)
        except AgentError as exc:  # the passes go on polling it
            log.debug("watching copy %s on %s: %s", plan.copy_id, plan.agent.name, exc)
            return
        if copy is None or copy["state"] != state:
            self.wake()

    async def _drive(self, state: str, out: Outcome) -> None:
        plan, copy = out.plan, out.copy
        where = f"agent {plan.agent.name!r}"
        if copy is None:
            out.copy = await self.client.create_copy(plan.agent, plan.request)
            out.notes.append(f"started copy {plan.copy_id} on {where}")
            return
        copy_state = copy["state"]
        if copy_state == "paused" or (copy_state == "failed" and state == S.QUEUED.value):
            why = copy.get("last_error") or copy_state
            out.copy = await self.client.copy_action(plan.agent, plan.copy_id, "resume")
            out.notes.append(f"resumed copy {plan.copy_id} on {where} ({why})")
        elif copy_state == "failed" and copy.get("retryable") and self.retries.retry_for > 0:
            await self._retry(out, where)
        elif copy_state == "failed":
            out.error = f"copy {plan.copy_id} on {where} failed: {copy.get('last_error')}"
        elif copy_state == "cancelled":
            out.error = f"copy {plan.copy_id} on {where} was cancelled outside the coordinator"
        elif copy_state == COMPLETED:
            self.retries.forget(plan.copy_id)

    async def _retry(self, out: Outcome, where: str) -> None:
        """A copy that failed for a side it could not reach: resumed after a while
        (``leg_retry.py``), until its streak of failures is too old."""
        plan, copy = out.plan, out.copy
        assert copy is not None
        error = copy.get("last_error")
        step, streak = self.retries.step(plan.copy_id, _progress(copy), time.monotonic())
        if step is Step.GIVE_UP:
            out.error = (
                f"copy {plan.copy_id} on {where} failed: {error} (resumed {streak.attempts} "
                f"times over {self.retries.retry_for:g} s: resume the transfer to try again)"
            )
            return
        out.retrying = True
        if step is Step.BEGIN:
            out.warnings.append(
                f"copy {plan.copy_id} on {where} failed: {error}; resuming it in "
                f"{streak.delay():g} s, and again for up to {self.retries.retry_for:g} s"
            )
        elif step is Step.RESUME:
            out.copy = await self.client.copy_action(plan.agent, plan.copy_id, "resume")
            out.notes.append(f"resumed copy {plan.copy_id} on {where} (retry {streak.attempts})")

    async def _stop(self, state: str, out: Outcome) -> None:
        plan, copy = out.plan, out.copy
        if copy is None:
            return
        self.retries.forget(plan.copy_id)  # a user stopped the transfer
        live = COPY_HOLDING if state == S.CANCELLED.value else COPY_ACTIVE
        if copy["state"] not in live:
            return
        action = "cancel" if state == S.CANCELLED.value else "pause"
        out.copy = await self.client.copy_action(plan.agent, plan.copy_id, action)
        out.notes.append(f"{action}: copy {plan.copy_id} on agent {plan.agent.name!r}")

    # ------------------------------------------------------------ applying answers

    def _apply(self, session: Session, view: View, outcomes: list[Outcome]) -> None:
        transfer = session.get(Transfer, view.id)
        if transfer is None:
            return
        current = transfer.state == view.state  # else a user acted meanwhile: they win
        legs = {leg.id: leg for leg in transfer.legs}
        errors = [view.error] if view.error else []
        for out in outcomes:
            self._waiting_events(session, transfer, out)
            for note in out.notes:
                events.record(session, transfer, "scheduler", note)
            for note in out.warnings:
                events.record(session, transfer, "scheduler", note, warning=True)
            if out.copy is not None:
                self._copy_seen(session, transfer, out, legs, current)
            if out.error is not None:
                errors.append(out.error)
                for leg_id in out.plan.leg_ids:
                    legs[leg_id].last_error = out.error
        transfer.done_bytes = sum(leg.done_bytes for leg in transfer.legs)
        transfer.updated_at = utcnow()
        if current:
            self._advance(session, transfer, outcomes, errors)

    def _waiting_events(self, session: Session, transfer: Transfer, out: Outcome) -> None:
        key = (transfer.id, out.plan.agent.id)
        if out.waiting is not None and key not in self._waiting:
            self._waiting.add(key)
            events.record(
                session,
                transfer,
                "scheduler",
                f"waiting for agent: {out.waiting} (retrying)",
                warning=True,
            )
        elif out.waiting is None and key in self._waiting:
            self._waiting.discard(key)
            events.record(
                session, transfer, "scheduler", f"agent {out.plan.agent.name!r} answers again"
            )

    def _copy_seen(
        self,
        session: Session,
        transfer: Transfer,
        out: Outcome,
        legs: Mapping[int, TransferLeg],
        current: bool,
    ) -> None:
        copy = out.copy
        assert copy is not None
        state, done = copy["state"], _progress(copy)
        total = out.plan.bytes or 1
        for leg_id, size in zip(out.plan.leg_ids, out.plan.leg_bytes, strict=True):
            leg = legs[leg_id]
            leg.copy_id, leg.copy_state = copy["id"], state
            if state == COMPLETED:
                leg.done_bytes, leg.summary = size, copy.get("summary")
            else:
                leg.done_bytes = min(size, done * size // total)
            if not current:
                continue
            if state == COMPLETED and leg.state != COMPLETED:
                leg.state, leg.last_error = COMPLETED, None
                detail = f"leg {leg.index} completed ({size} bytes)" + _summary_line(leg.summary)
                events.record(session, transfer, "leg", detail)
            elif state in COPY_ACTIVE and transfer.state in (S.QUEUED.value, S.RUNNING.value):
                leg.state, leg.last_error = S.RUNNING.value, None  # (a retried copy runs again)
            elif state == "failed" and transfer.state == S.RUNNING.value:
                leg.last_error = copy.get("last_error")
                if not out.retrying:
                    leg.state = S.FAILED.value

    def _advance(
        self, session: Session, transfer: Transfer, outcomes: list[Outcome], errors: list[str]
    ) -> None:
        if transfer.state == S.QUEUED.value:
            if errors:
                self._transition(session, transfer, Action.START, "started")
            elif not all(_under_way(o) for o in outcomes):
                return  # some copy is not under way yet: the next pass again
            else:
                self._transition(session, transfer, Action.START, "every leg is under way")
        if transfer.state != S.RUNNING.value:
            return
        if errors:
            transfer.last_error = errors[0]
            self._transition(session, transfer, Action.FAIL, errors[0])
            for leg in transfer.legs:  # the next passes pause their copies
                if leg.state not in (COMPLETED, S.FAILED.value):
                    leg.state = S.PAUSED.value
        elif all(leg.state == COMPLETED for leg in transfer.legs):
            transfer.last_error = None
            self._transition(session, transfer, Action.COMPLETE, "every leg completed")

    def _transition(
        self, session: Session, transfer: Transfer, action: Action, detail: str
    ) -> None:
        before = S(transfer.state)
        try:
            after = next_state(before, action)
        except TransitionError:  # defensive: _advance checks the state first
            return
        transfer.state = after.value
        events.record(
            session,
            transfer,
            "state",
            f"{action.value}: {detail}",
            from_state=before,
            to_state=after,
        )
