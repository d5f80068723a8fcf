"""Campaign runs started by the coordinator: the runner as a child process, and the
watcher that follows it (issue 5).

The runner (``reservoir campaign run CAMPAIGN [--quick] --out DIR``, the command of
the ``campaign_command`` setting) runs in a session of its own with DIR =
``<data_dir>/campaigns/<id>``; its standard output and error go to DIR/console.txt.
It keeps in DIR:

- ``progress.json``, rewritten atomically at every change: state, done/total runs,
  the scenario and repetition running, elapsed and ETA seconds, error;
- ``results.json``, the runs so far (``campaigns/results.py``), rewritten after
  every finished run; ``report.html`` at the end; ``log.txt``;

and exits 0 when every run completed, 1 when a run failed, 2 for a bad campaign file,
143 when SIGTERM stopped it (state ``cancelled``).

:class:`CampaignWatcher` looks at every run it follows each ``interval`` (1 s): copies
progress.json into the run's row, stores results.json (validated) whenever it changed,
and once the runner has exited sets the final state from its exit status (a runner
that failed gets its progress error and the tail of its log as ``error``). A cancel is
a SIGTERM; a runner that has not ended ``kill_after`` seconds later is killed with its
process group.

After a coordinator restart (:meth:`CampaignWatcher.recover`), a run still marked
running whose runner is alive (its PID with ``--out DIR`` on its command line) is
followed again; one whose runner is gone takes the final state of its progress.json if
it wrote one, else becomes failed, saying so. Stopping the coordinator leaves runners
running: a campaign outlives a restart of the API.

Results are read and summed up with :mod:`reservoir.campaigns.results`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from reservoir.campaigns.results import CampaignRun as Results
from reservoir.campaigns.results import ResultsError, summary_rows
from reservoir.server.app.campaign_models import ACTIVE_STATES, CampaignState
from reservoir.server.app.core.config import ENV_PREFIX
from reservoir.server.app.tables import CampaignRun, utcnow

__all__ = [
    "EXIT_BAD_CAMPAIGN",
    "EXIT_CANCELLED",
    "CampaignWatcher",
    "RunnerProgress",
    "StoredResults",
    "log_tail",
    "read_progress",
    "validate_results",
]

log = logging.getLogger("reservoir.server.campaigns")

S = CampaignState
EXIT_BAD_CAMPAIGN = 2
EXIT_CANCELLED = 128 + signal.SIGTERM  # 143
ERROR_MAX = 4096  # the error column
TAIL_LINES = 20
KILL_AFTER = 120.0  # seconds a cancelled runner has to clean its lab up
CONSOLE = "console.txt"


class RunnerProgress(BaseModel):
    """progress.json as the runner writes it (unknown keys ignored)."""

    model_config = ConfigDict(extra="ignore")

    state: str
    done: int = 0
    total: int = 0
    scenario: str | None = None
    repetition: int | None = None
    elapsed_s: float | None = None
    eta_s: float | None = None
    error: str | None = None


def read_progress(out: Path) -> RunnerProgress | None:
    """DIR/progress.json, or None if it is missing or not what the contract says."""
    try:
        return RunnerProgress.model_validate_json((out / "progress.json").read_bytes())
    except (OSError, ValidationError):
        return None


def log_tail(out: Path, lines: int = TAIL_LINES) -> str:
    """The last lines of DIR/log.txt, else of DIR/console.txt ("" if neither has any)."""
    for name in ("log.txt", CONSOLE):
        try:
            with open(out / name, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        kept = [line for line in text.splitlines() if line.strip()][-lines:]
        if kept:
            return f"--- last lines of {name} ---\n" + "\n".join(kept)
    return ""


@dataclass(frozen=True)
class StoredResults:
    """A validated results.json as the database keeps it."""

    data: dict[str, Any]  # the normalized JSON (CampaignRun.to_json)
    summary: dict[str, Any]  # rows (summary_rows, as plain data), topology, bottleneck_bps,
    # runs (recorded) and failed (runs with an error)
    campaign: str
    run_id: str
    finished: bool


def validate_results(data: Any) -> StoredResults:
    """Validates campaign results (JSON data); raises ``ResultsError`` naming the field."""
    result = Results.from_json(data)
    summary = {
        "rows": [dataclasses.asdict(row) for row in summary_rows(result)],
        "topology": result.topology.kind,
        "bottleneck_bps": result.topology.bottleneck_bps,
        "runs": len(result.runs),
        "failed": sum(1 for r in result.runs if not r.ok),
    }
    return StoredResults(
        result.to_json(), summary, result.campaign, result.run_id, result.finished is not None
    )


def store_results(row: CampaignRun, stored: StoredResults) -> None:
    row.results = stored.data
    row.summary = stored.summary
    row.run_id = stored.run_id[:128]
    row.results_at = utcnow()


def _clip(text: str) -> str:
    """At most ERROR_MAX characters, dropping the beginning of the log tail if needed."""
    if len(text) <= ERROR_MAX:
        return text
    head, sep, tail = text.partition("\n--- last lines")
    room = ERROR_MAX - len(head) - 2
    if not sep or room < 200:
        return text[: ERROR_MAX - 1] + "…"
    return head + "\n…" + (sep + tail)[-room:]


# ---------------------------------------------------------------- processes


def runner_env() -> dict[str, str]:
    """The coordinator's environment without its own settings (its tokens among them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def spawn(argv: list[str], out: Path, env: dict[str, str] | None = None) -> int:
    """Starts ``argv`` in a new session, output to DIR/console.txt; its PID. ``env`` is
    added to the runner's environment (a real campaign's coordinator URL and token).

    ``posix_spawn`` rather than ``subprocess``: the watcher reaps the child itself
    with ``waitpid`` and a runner may outlive this process. Raises OSError."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(out / CONSOLE), flags, 0o600),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    return os.posix_spawnp(
        argv[0],
        argv,
        runner_env() | (env or {}),
        file_actions=actions,
        setsid=True,
        setsigmask=(),
        setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM),
    )


def _alive_runner(pid: int, out: Path) -> bool:
    """Whether PID is a live process (not a zombie) with ``out`` on its command line."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rpartition(")")[2].split()[:1] == ["Z"]:
        return False
    return os.fsencode(str(out)) in cmdline


@dataclass
class _Live:
    """A runner followed by the watcher."""

    id: str
    pid: int
    out: Path
    child: bool  # ours to reap; False: adopted after a restart
    results_stamp: tuple[int, int, int] | None = None  # results.json's mtime, inode, size
    results_error: str | None = None  # why that results.json is not usable
    term_at: float | None = None  # monotonic time of the SIGTERM
    killed: bool = False

    def exited(self) -> tuple[bool, int | None]:
        """(ended, exit code: negative for a signal, None when not known)."""
        if self.child:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return True, None
            if pid == 0:
                return False, None
            return True, os.waitstatus_to_exitcode(status)
        return (not _alive_runner(self.pid, self.out)), None


# ---------------------------------------------------------------- the watcher


class CampaignWatcher:
    """Starts runners and follows them; see the module's docstring."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        interval: float = 1.0,
        kill_after: float = KILL_AFTER,
    ) -> None:
        self.sessions = sessions
        self.interval = interval
        self.kill_after = kill_after
        self._live: dict[str, _Live] = {}
        self.lock = threading.Lock()  # the live runners; also held by start() and cancel()
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    # ------------------------------------------------------------ lifespan

    async def start(self) -> None:
        await asyncio.to_thread(self.recover)
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stops watching (after the pass under way); the runners keep running."""
        if self._task is None:
            return
        self._stop.set()
        await self._task
        self._task = None

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.to_thread(self.tick)
            except Exception:  # one bad pass must not stop the watcher
                log.exception("campaign watcher pass failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)

    # ------------------------------------------------------------ runners

    def follow(self, run_id: str, pid: int, out: Path, *, child: bool = True) -> None:
        """Follows a runner just started (call with :attr:`lock` held)."""
        self._live[run_id] = _Live(run_id, pid, out, child)

    def terminate(self, run_id: str, pid: int, out: Path) -> None:
        """SIGTERM to the run's runner (call with :attr:`lock` held); a runner already
        gone is left to the next pass."""
        live = self._live.get(run_id)
        if live is not None:
            live.term_at = time.monotonic()  # not reaped yet: the pass holds the lock
        elif not _alive_runner(pid, out):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)

    def recover(self) -> None:
        """After a restart: follow the runners still alive, end the rows of those gone."""
        with self.sessions() as session, self.lock:
            rows = session.scalars(select(CampaignRun).where(CampaignRun.state.in_(ACTIVE_STATES)))
            for row in rows:
                if row.id in self._live:  # this watcher's own runner (a lifespan restart)
                    continue
                out = Path(row.out_dir) if row.out_dir else None
                if row.pid is not None and out is not None and _alive_runner(row.pid, out):
                    log.info("campaign run %s: following runner %d again", row.id, row.pid)
                    live = self._live[row.id] = _Live(row.id, row.pid, out, child=False)
                    if row.state == S.CANCELLING:  # the SIGTERM's time is lost: from now
                        live.term_at = time.monotonic()
                    continue
                self._gone_while_down(row, out)
            session.commit()

    def _gone_while_down(self, row: CampaignRun, out: Path | None) -> None:
        progress = read_progress(out) if out is not None else None
        if out is not None:
            self._take_results(row, out)
        if progress is not None and progress.state in (S.COMPLETED, S.CANCELLED, S.FAILED):
            _copy_progress(row, progress)
            row.state = progress.state
            if progress.state == S.FAILED:
                row.error = _clip(_failure("the runner failed", progress, out))
        else:
            head = (
                f"the coordinator restarted while the run was going and its runner "
                f"(pid {row.pid}) is gone"
            )
            row.state = S.FAILED.value
            row.error = _clip(_failure(head, progress, out))
        row.finished_at = row.finished_at or utcnow()
        log.warning("campaign run %s: runner gone while the coordinator was down", row.id)

    # ------------------------------------------------------------ one pass

    def tick(self) -> None:
        """One look at every runner followed."""
        with self.lock:
            live = list(self._live.values())
        for item in live:
            try:
                self._look(item)
            except Exception:
                log.exception("campaign run %s: watcher pass failed", item.id)

    def _look(self, live: _Live) -> None:
        """Held under :attr:`lock` throughout, so that a cancel sees the final state."""
        with self.lock:
            self._look_locked(live)

    def _look_locked(self, live: _Live) -> None:
        ended, code = live.exited()
        if ended:
            del self._live[live.id]
        elif self._overdue(live):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(live.pid, signal.SIGKILL)
            live.killed = True
        progress = read_progress(live.out)
        with self.sessions() as session:
            row = session.get(CampaignRun, live.id)
            if row is None:
                return
            if progress is not None:
                _copy_progress(row, progress)
            why = self._take_results(row, live.out, live)
            if ended:
                self._finish(row, live, code, progress, why)
            session.commit()

    def _overdue(self, live: _Live) -> bool:
        """Cancelled, and still there ``kill_after`` seconds later (not killed yet)."""
        if live.term_at is None or live.killed:
            return False
        return time.monotonic() - live.term_at > self.kill_after

    def _take_results(self, row: CampaignRun, out: Path, live: _Live | None = None) -> str | None:
        """Stores DIR/results.json if it changed; returns why it is not usable, if not."""

        path = out / "results.json"
        try:
            st = path.stat()
        except OSError:
            return "no results.json"
        stamp = (st.st_mtime_ns, st.st_ino, st.st_size)
        if live is not None and stamp == live.results_stamp:
            return live.results_error
        stored: StoredResults | None = None
        error: str | None = None
        try:
            stored = validate_results(json.loads(path.read_bytes()))
        except (OSError, ValueError, ResultsError) as exc:  # ValueError: not JSON
            why = str(exc) if isinstance(exc, ResultsError) else f"not JSON: {exc}"
            error = f"results.json: {why}"
        if live is not None:
            live.results_stamp, live.results_error = stamp, error
        if stored is None:
            return error
        store_results(row, stored)
        return None

    def _finish(
        self,
        row: CampaignRun,
        live: _Live,
        code: int | None,
        progress: RunnerProgress | None,
        why: str | None,
    ) -> None:
        row.exit_code = code
        row.finished_at = utcnow()
        row.eta_s = None
        bad_results = None if row.results is not None else f"it left {why or 'no results'}"
        said = progress.state if progress is not None else None
        if live.killed:
            row.state = S.CANCELLED.value
            row.error = f"killed: the runner had not ended {self.kill_after:g} s after SIGTERM"
        elif code in (EXIT_CANCELLED, -signal.SIGTERM) or (code is None and said == S.CANCELLED):
            row.state = S.CANCELLED.value
        elif (code == 0 or (code is None and said == S.COMPLETED)) and bad_results is None:
            row.state = S.COMPLETED.value
        else:
            row.state = S.FAILED.value
            row.error = _clip(_failure(_exit_head(code, bad_results), progress, live.out))
        log.info("campaign run %s: %s (exit %s)", row.id, row.state, code)


def _copy_progress(row: CampaignRun, progress: RunnerProgress) -> None:
    row.done = max(0, progress.done)
    row.total = max(0, progress.total)
    row.scenario = progress.scenario[:256] if progress.scenario else None
    row.repetition = progress.repetition
    row.elapsed_s = progress.elapsed_s
    row.eta_s = progress.eta_s


def _exit_head(code: int | None, bad_results: str | None) -> str:
    if code is None:
        return "the runner ended without saying it completed"
    if code == 0:
        return f"the runner exited 0 but {bad_results}"
    if code == EXIT_BAD_CAMPAIGN:
        return "the campaign could not be run (exit 2)"
    if code < 0:
        return f"the runner was killed by signal {-code}"
    return f"the runner exited with code {code}"


def _failure(head: str, progress: RunnerProgress | None, out: Path | None) -> str:
    parts = [head]
    if progress is not None and progress.error:
        parts.append(progress.error)
    tail = log_tail(out) if out is not None else ""
    text = ": ".join(parts)
    return f"{text}\n{tail}" if tail else text
