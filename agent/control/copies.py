"""The copy manager: each copy is an asyncio task in the agent's event loop.

States and the transitions the API may ask for::

    queued --> running --> completed | failed
      |  \\       |  ^
      |   pause  pause resume (also from failed; continues from the engine's checkpoint)
      |       \\  v  |
      +------> paused
    queued, running, paused, failed --cancel--> cancelled

Pause cancels the running ``copy`` after the engine saved its checkpoint; resume runs
``copy`` again with ``resume=True`` and the same checkpoint file. A small JSON file per
copy (``<state>/copies/<id>.json``, written atomically, mode 0600) lets a restarted agent
list past copies; one that was queued or running when the agent stopped comes back as
paused, ready to resume. CHAP secrets of a copy are kept in that file (for resume).
A paused or failed copy keeps its destinations reserved for its resume (see
``reservoir.agent.transfer``); cancelling it releases them. Copies share the agent's
pool of warm sessions (:attr:`CopyManager.pool`): the sessions a copy gives back are
taken by the next copy over the same path, which starts without logging in.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import secrets
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fastapi import status

from reservoir.agent.control.errors import ControlError
from reservoir.agent.control.jump import jump_rates
from reservoir.agent.control.models import (
    CapsBase,
    CopyCreate,
    CopyState,
    ProgressPublic,
)
from reservoir.agent.control.nic_pacing import NicPacer
from reservoir.agent.control.nics import host_nics
from reservoir.agent.control.telemetry import TelemetryTail, read_tail
from reservoir.agent.control.volumes import Volumes
from reservoir.agent.initiator import Session, SessionPool, Starter
from reservoir.agent.telemetry import Record
from reservoir.agent.transfer import (
    Capper,
    CopyError,
    CopyOptions,
    CopySummary,
    JumpStart,
    Progress,
    RemoteUnreachableError,
    StreamCaps,
)
from reservoir.agent.transfer import copy as engine_copy
from reservoir.agent.transfer import release as engine_release
from reservoir.common import store

__all__ = [
    "CopyConflictError",
    "CopyFn",
    "CopyJob",
    "CopyManager",
    "UnknownCopyError",
    "summary_dict",
]

log = logging.getLogger("reservoir.agent")

ACTIVE = frozenset({CopyState.QUEUED, CopyState.RUNNING})
CAN_PAUSE = ACTIVE
CAN_RESUME = frozenset({CopyState.PAUSED, CopyState.FAILED})
# a failed copy still holds its destinations (for its resume): cancelling releases them
CAN_CANCEL = frozenset({CopyState.QUEUED, CopyState.RUNNING, CopyState.PAUSED, CopyState.FAILED})
CAN_CAP = frozenset({CopyState.QUEUED, CopyState.RUNNING, CopyState.PAUSED})
STOP_RETRY = 3.0  # seconds before cancelling again a copy task that swallowed a cancel


class CopyFn(Protocol):
    async def __call__(
        self,
        source: str,
        dest: str | Sequence[str],
        options: CopyOptions,
        *,
        progress: Callable[[Progress], None] | None = None,
    ) -> CopySummary: ...


class ReleaseFn(Protocol):
    async def __call__(
        self, source: str, dest: str | Sequence[str], options: CopyOptions
    ) -> list[str]: ...


class UnknownCopyError(ControlError):
    """No copy has this id."""

    status_code = status.HTTP_404_NOT_FOUND
    code = "not_found"

    def __init__(self, copy_id: str) -> None:
        super().__init__(f"no copy {copy_id!r}")


class CopyConflictError(ControlError):
    """The copy is not in a state that allows this; the message says why."""

    status_code = status.HTTP_409_CONFLICT
    code = "conflict"


@dataclass
class CopyJob:
    id: str
    request: CopyCreate
    checkpoint: Path
    state: CopyState = CopyState.QUEUED
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    progress: ProgressPublic = field(default_factory=ProgressPublic)
    last_error: str | None = None
    retryable: bool = False  # failed with RemoteUnreachableError: a resume may go on
    summary: dict[str, Any] | None = None
    caps: CapsBase | None = None
    runs: int = 0
    stream_caps: StreamCaps | None = None  # while it runs: what is applied to its streams
    task: asyncio.Task[None] | None = None
    intent: CopyState | None = None  # paused or cancelled, while the task winds down
    telemetry_from: int | None = None  # where its telemetry file ended at its last start

    def dump(self) -> dict[str, Any]:
        request = self.request.model_dump(mode="json", exclude={"chap"})
        chap = self.request.chap
        return {
            "id": self.id,
            "request": request,
            "chap": None if chap is None else [chap.user, chap.secret.get_secret_value()],
            "checkpoint": str(self.checkpoint),
            "state": self.state.value,
            "created": self.created,
            "updated": self.updated,
            "progress": self.progress.model_dump(mode="json"),
            "last_error": self.last_error,
            "retryable": self.retryable,
            "summary": self.summary,
            "caps": None if self.caps is None else self.caps.model_dump(mode="json"),
            "runs": self.runs,
        }

    @classmethod
    def restore(cls, data: dict[str, Any]) -> CopyJob:
        request = dict(data["request"])
        if data.get("chap"):
            request["chap"] = {"user": data["chap"][0], "secret": data["chap"][1]}
        caps = data.get("caps")
        return cls(
            id=str(data["id"]),
            request=CopyCreate.model_validate(request),
            checkpoint=Path(data["checkpoint"]),
            state=CopyState(data["state"]),
            created=float(data["created"]),
            updated=float(data["updated"]),
            progress=ProgressPublic.model_validate(data.get("progress") or {}),
            last_error=data.get("last_error"),
            retryable=bool(data.get("retryable", False)),
            summary=data.get("summary"),
            caps=None if caps is None else CapsBase.model_validate(caps),
            runs=int(data.get("runs", 0)),
        )


def summary_dict(summary: CopySummary) -> dict[str, Any]:
    data = dataclasses.asdict(summary)
    data["rate"] = summary.rate
    data["verification"] = summary.verification
    data["paths"] = [dataclasses.asdict(p) for p in summary.paths()]
    return data


def progress_public(p: Progress) -> ProgressPublic:
    return ProgressPublic(
        done_bytes=p.done_bytes,
        total_bytes=p.total_bytes,
        sent_bytes=p.sent_bytes,
        rate=p.rate,
        eta=p.eta,
        streams_up=p.streams_up,
        streams=p.streams,
        paths_up=p.paths_up,
        paths=p.paths,
    )


class CopyManager:
    """Copies of one agent, persisted under ``state_dir``."""

    def __init__(
        self,
        state_dir: Path,
        *,
        copy_fn: CopyFn = engine_copy,
        release_fn: ReleaseFn = engine_release,
        max_running: int = 4,
        telemetry_interval: float = 0.5,
        volumes: Volumes | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        # what copies may read and write (the agent's volumes); None: any path, for
        # tests of the manager alone
        self.volumes = volumes
        self._tails = TelemetryTail()
        self.copy_fn = copy_fn
        self.release_fn = release_fn  # ends a cancelled copy's hold on its destinations
        self.telemetry_interval = telemetry_interval
        self.jobs: dict[str, CopyJob] = {}
        self.capper: Capper | None = None  # the agent's cwnd cap mechanism, if any
        self.pacer: NicPacer | None = None  # the agent's NIC pacing, if any
        self.pool: SessionPool[Session] | None = None  # the agent's warm sessions, if any
        self.starter: Starter | None = None  # jump starts of new connections, if any
        self._slots = asyncio.Semaphore(max_running)
        self._changed: dict[str, asyncio.Event] = {}  # copy -> set at its next save
        self._closing = False  # the agent is stopping: waits answer at once
        for name in ("copies", "checkpoints", "telemetry"):
            (self.state_dir / name).mkdir(parents=True, exist_ok=True, mode=0o700)

    # ------------------------------------------------------------ persistence

    def _state_path(self, copy_id: str) -> Path:
        return self.state_dir / "copies" / f"{copy_id}.json"

    def telemetry_path(self, copy_id: str) -> Path:
        return self.state_dir / "telemetry" / f"{copy_id}.jsonl"

    def _save(self, job: CopyJob) -> None:
        job.updated = time.time()
        store.write_json_atomic(self._state_path(job.id), job.dump())
        changed = self._changed.pop(job.id, None)
        if changed is not None:
            changed.set()

    def load(self) -> int:
        """Reads the copies a previous agent left; returns how many."""
        for path in sorted((self.state_dir / "copies").glob("*.json")):
            try:
                job = CopyJob.restore(store.read_json(path))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring copy state %s: %s", path, exc)
                continue
            if job.state in ACTIVE:
                job.last_error = f"the agent stopped while the copy was {job.state.value}"
                job.state = CopyState.PAUSED
                self._save(job)
            self.jobs[job.id] = job
        return len(self.jobs)

    # ------------------------------------------------------------ queries

    def get(self, copy_id: str) -> CopyJob:
        job = self.jobs.get(copy_id)
        if job is None:
            raise UnknownCopyError(copy_id)
        return job

    async def wait(self, copy_id: str, state: CopyState, seconds: float) -> CopyJob:
        """The copy once it is no longer in ``state``, or after ``seconds``, whichever
        comes first (a watcher learns that a copy ended without polling for it); at
        once while the agent is stopping."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (job := self.get(copy_id)).state == state and not self._closing:
            left = deadline - loop.time()
            if left <= 0:
                break
            changed = self._changed.setdefault(copy_id, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), left)
        return job

    def stop_waits(self) -> None:
        """Answers every :meth:`wait` now, and those that come later at once: the agent
        is stopping, and its server waits for the requests it is answering."""
        self._closing = True
        for changed in self._changed.values():
            changed.set()
        self._changed.clear()

    def all(self) -> list[CopyJob]:
        return sorted(self.jobs.values(), key=lambda j: (j.created, j.id))

    def telemetry(self, copy_id: str, limit: int = 100) -> list[Record]:
        self.get(copy_id)
        return read_tail(self.telemetry_path(copy_id), limit)

    def telemetry_json(self, copy_id: str, limit: int = 100) -> bytes:
        """:meth:`telemetry` as the JSON array the API serves."""
        self.get(copy_id)
        return self._tails.json(self.telemetry_path(copy_id), limit)

    # ------------------------------------------------------------ transitions

    def existing(self, request: CopyCreate) -> CopyJob | None:
        """The copy a client already created under ``request.id`` with the same request
        (an idempotent retry), or ``None``; :class:`CopyConflictError` if that id holds
        another request."""
        job = None if request.id is None else self.jobs.get(request.id)
        if job is None:
            return None
        if job.request != request:
            raise CopyConflictError(f"copy {job.id} exists with another request")
        return job

    def create(self, request: CopyCreate) -> CopyJob:
        """A new copy, started; under ``request.id`` if given (a copy created again under
        the id of a lost one resumes from its checkpoint, if that is still there).
        :class:`VolumeRefusedError` if it names a local path that is not a volume."""
        copy_id = request.id or secrets.token_hex(8)
        if copy_id in self.jobs:
            raise CopyConflictError(f"copy {copy_id} exists")
        self._check_volumes(request)
        if request.caps is not None and request.caps.stream_cwnd_caps and self.capper is None:
            raise CopyConflictError("this agent applies no cwnd caps (cwnd_caps = off)")
        checkpoint = self.state_dir / "checkpoints" / f"{copy_id}.json"
        job = CopyJob(copy_id, request, checkpoint)
        job.caps = request.caps
        self.jobs[copy_id] = job
        self._start(job)
        return job

    async def pause(self, copy_id: str) -> CopyJob:
        return await self._stop(self.get(copy_id), CopyState.PAUSED, CAN_PAUSE, "pause")

    async def cancel(self, copy_id: str) -> CopyJob:
        """Stops the copy for good: its destinations are released (a paused or failed
        copy keeps them reserved, to be resumed), then its checkpoint is deleted."""
        job = self.get(copy_id)
        if job.state in (CopyState.PAUSED, CopyState.FAILED) and job.task is None:
            self._check(job, CAN_CANCEL, "cancel")
        else:
            job = await self._stop(job, CopyState.CANCELLED, CAN_CANCEL, "cancel")
        chap = job.request.chap
        await self.release_fn(
            job.request.source,
            job.request.dest,
            CopyOptions(
                checkpoint=job.checkpoint,
                chap=None if chap is None else (chap.user, chap.secret.get_secret_value()),
            ),
        )
        self._finish(job, CopyState.CANCELLED)
        return job

    def resume(self, copy_id: str) -> CopyJob:
        job = self.get(copy_id)
        self._check(job, CAN_RESUME, "resume")
        self._check_volumes(job.request)  # the volumes may have changed since
        job.state = CopyState.QUEUED
        self._start(job)
        return job

    def _check_volumes(self, request: CopyCreate) -> None:
        """:class:`VolumeRefusedError` unless the copy's local sides are volumes."""
        if self.volumes is not None:
            self.volumes.check_copy(request.source, request.dests)

    def set_caps(self, copy_id: str, caps: CapsBase) -> CopyJob:
        job = self.get(copy_id)
        self._check(job, CAN_CAP, "set caps on")
        for stream in (*caps.stream_cwnd_caps, *caps.stream_pacing_rates):
            if stream >= job.request.streams:
                raise CopyConflictError(
                    f"copy {job.id} has {job.request.streams} streams; there is no stream {stream}"
                )
        if caps.stream_cwnd_caps and self.capper is None:
            raise CopyConflictError("this agent applies no cwnd caps (cwnd_caps = off)")
        job.caps = caps
        if job.stream_caps is not None:  # it runs
            job.stream_caps.want(caps.stream_cwnd_caps, caps.stream_pacing_rates)
            self._pace(job)
        self._save(job)
        return job

    def _pace(self, job: CopyJob) -> concurrent.futures.Future[None] | None:
        if self.pacer is None:
            return None
        rates = {} if job.caps is None else job.caps.nic_pacing_rates
        return self.pacer.set(job.id, rates, _flows(job, rates))

    async def _jump(self, job: CopyJob) -> JumpStart | None:
        """The rates a run's new connections start at, from its NIC pacing rates
        (None: this agent does not jump-start, or the copy paces no NIC)."""
        if self.starter is None or job.caps is None or not job.caps.nic_pacing_rates:
            return None
        rates = job.caps.nic_pacing_rates
        return JumpStart(self.starter, jump_rates(rates, _flows(job, rates), await host_nics()))

    async def _paced(self, job: CopyJob) -> None:
        """Sets the copy's NIC pacing and waits until the qdiscs are in place, so the
        plan holds from the first connection (a NIC that cannot be paced is in the
        pacer's errors, and the copy goes on)."""
        done = self._pace(job)
        if done is None:
            return
        try:
            await asyncio.wrap_future(done)
        except Exception as exc:  # pacing never stops a copy
            log.warning("copy %s: NIC pacing not set: %s", job.id, exc)

    async def close(self) -> None:
        """Pauses every active copy (checkpoint saved), for a clean agent stop."""
        jobs = [j for j in self.jobs.values() if j.task is not None and j.intent is None]
        for job in jobs:
            try:
                await self._stop(job, CopyState.PAUSED, CAN_PAUSE, "pause")
            except CopyConflictError:  # it ended (completed, failed) meanwhile
                continue
            job.last_error = "paused: the agent stopped"
            self._save(job)

    def _check(self, job: CopyJob, allowed: frozenset[CopyState], verb: str) -> None:
        if job.intent is not None:
            raise CopyConflictError(f"cannot {verb} copy {job.id}: it is being {job.intent.value}")
        if job.state not in allowed:
            states = ", ".join(sorted(s.value for s in allowed))
            raise CopyConflictError(
                f"cannot {verb} copy {job.id}: it is {job.state.value} (allowed when {states})"
            )

    async def _stop(
        self, job: CopyJob, to: CopyState, allowed: frozenset[CopyState], verb: str
    ) -> CopyJob:
        self._check(job, allowed, verb)
        task = job.task
        if task is None:  # defensive: an active state always has a task
            self._finish(job, to)
            return job
        job.intent = to
        while not task.done():  # again if a cancellation got swallowed on the way
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_RETRY)
        if job.task is task:  # cancelled before its first step: _run never ran
            job.task, job.intent = None, None
            self._finish(job, to)
        if job.state != to:
            raise CopyConflictError(
                f"copy {job.id} ended {job.state.value} before it could be {to.value}"
            )
        return job

    def _start(self, job: CopyJob) -> None:
        job.last_error, job.retryable = None, False
        job.telemetry_from = _size(self.telemetry_path(job.id))  # this run's records follow
        self._save(job)
        job.task = asyncio.get_running_loop().create_task(
            self._run(job), name=f"reservoir-copy-{job.id}"
        )

    def _finish(self, job: CopyJob, state: CopyState, error: str | None = None) -> None:
        job.state = state
        if error is not None:
            job.last_error = error
        if state == CopyState.CANCELLED:
            with contextlib.suppress(FileNotFoundError):
                job.checkpoint.unlink()
        self._save(job)

    # ------------------------------------------------------------ the task

    def _options(self, job: CopyJob) -> CopyOptions:
        r = job.request
        return CopyOptions(
            stripe_unit=r.stripe_unit or CopyOptions.stripe_unit,
            streams=r.streams,
            extent_size=r.extent_size,
            paths=list(r.paths),
            resume=job.checkpoint.exists(),
            verify=r.verify,
            verification=r.verification,
            checkpoint=job.checkpoint,
            range=None if r.range is None else (r.range.offset, r.range.length),
            chap=None if r.chap is None else (r.chap.user, r.chap.secret.get_secret_value()),
            telemetry=self.telemetry_path(job.id),
            telemetry_interval=self.telemetry_interval,
            stream_caps=self._stream_caps(job),
            mptcp=r.mptcp,
            congestion=r.congestion,
            pool=self.pool,
        )

    def _stream_caps(self, job: CopyJob) -> StreamCaps:
        """The caps of a run: those set so far, applied to the streams as they open."""
        job.stream_caps = StreamCaps(self.capper)
        if job.caps is not None:
            cwnd = job.caps.stream_cwnd_caps if self.capper is not None else {}
            job.stream_caps.want(cwnd, job.caps.stream_pacing_rates)
        return job.stream_caps

    async def _run(self, job: CopyJob) -> None:
        def on_progress(p: Progress) -> None:
            job.progress = progress_public(p)

        try:
            async with self._slots:
                options = self._options(job)
                options.jump = await self._jump(job)
                await self._paced(job)
                job.state, job.runs = CopyState.RUNNING, job.runs + 1
                self._save(job)
                summary = await self.copy_fn(
                    job.request.source, job.request.dest, options, progress=on_progress
                )  # a str for one destination (as before), a list for a striped set
        except asyncio.CancelledError:
            if job.intent is None:  # the loop is going away, not our doing
                self._finish(job, CopyState.PAUSED, "interrupted")
                raise
            self._finish(job, job.intent)
        except CopyError as exc:
            log.error("copy %s failed: %s", job.id, exc)
            job.retryable = isinstance(exc, RemoteUnreachableError)
            self._finish(job, CopyState.FAILED, str(exc))
        except Exception as exc:
            log.exception("copy %s failed", job.id)
            self._finish(job, CopyState.FAILED, f"{type(exc).__name__}: {exc}")
        else:
            job.summary = summary_dict(summary)
            job.progress = job.progress.model_copy(
                update={"done_bytes": summary.length, "total_bytes": summary.length, "eta": 0.0}
            )
            self._finish(job, CopyState.COMPLETED)
        finally:
            job.task, job.intent, job.stream_caps = None, None, None
            if self.pacer is not None:
                self.pacer.clear(job.id)


def _size(path: Path) -> int:
    """The size of a file; 0 if there is none."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _flows(job: CopyJob, nics: Collection[str]) -> dict[str, int]:
    """The copy's streams on each NIC it paces: the plan's where its caps say."""
    flows = flows_per_nic(job.request, nics)
    if job.caps is not None:
        flows |= job.caps.nic_pacing_flows
    return flows


def flows_per_nic(request: CopyCreate, nics: Collection[str]) -> dict[str, int]:
    """How many of the copy's streams leave through each NIC it paces, where its caps
    do not say (the coordinator's do): its streams (per destination) dealt evenly over
    them, rounded up, so that with an even deal a per-flow rate of the NIC's rate over
    these never lets a NIC send more than its rate."""
    total = request.streams * len(request.dests)
    return {name: max(1, -(-total // len(nics))) for name in nics}
