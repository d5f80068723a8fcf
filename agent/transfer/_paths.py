"""Path health and failover for a copy over several paths (design section 3.4).

Every ``--path``/``--bind`` path is an RI2N endpoint watched by a
:class:`~reservoir.agent.paths.health.PathHealth`:

- *progress* is fed from completed pieces, not from TCP_INFO: every read or write
  command a stream's path-bound channel completes adds its bytes to the path's
  counter, sampled every ``sample`` seconds (0.1 s).  A completed SCSI command is
  end-to-end progress (the target answered), it works the same with MPTCP sockets
  and fake sessions, and it does not depend on the telemetry being on.  A path whose
  streams hold no extent (idle at the tail of a copy) counts as progressing, so it is
  never suspected for lack of work.
- the *round trip* of a path is the largest smoothed RTT of its streams' sockets
  (TCP_INFO, queueing included), read at every sample: the health machine judges
  silence on that scale, and heartbeats wait for it (a ping ``PING_RTTS``, a login
  ``LOGIN_RTTS`` round trips, ``hbspan`` at least), so a 350 ms path is not failed for
  being far away.
- *heartbeats* are NOP-Out pings on one extra session per path every ``hbspan``; a
  ping that fails or times out drops that session, so the next heartbeat logs in on
  a fresh one.  On a failed path that login is the recovery probe: a new one starts
  every ``RETRY`` (0.25 s) while the earlier ones are still under way (each for up to
  ``3 x hbspan``), so a SYN lost while the link was down is not waited for: the first
  connection attempt after the link comes back gets through within ``RETRY``.

The thresholds are scaled to the 10 Hz sampling: ``ft_hthresh`` 5 (another path
completed pieces in 6 samples), ``slow_tout`` 1 s (the suspect completed nothing for a
second); see :data:`DEFAULT_HEALTH`.  When a path FAILS the engine stops its streams
and their extents go back to the queue; when it RECOVERS the engine reopens them.
The failover window of a path is the time from its last progress to the moment the
extents it held had all been taken by streams on other paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from reservoir.agent.paths.health import HealthConfig, PathEvent, PathHealth, PathState

DEFAULT_HEALTH = HealthConfig(
    ft_hthresh=5, ft_lthresh=1, slow_tout=1.0, hbspan=1.0, hbweight=3, hb_miss_limit=3
)
SAMPLE = 0.1
RETRY = 0.25  # a new login on a failed path this often
PING_RTTS = 4.0  # a heartbeat waits at least this many of its path's round trips ...
LOGIN_RTTS = 8.0  # ... and a heartbeat session's login this many (TCP, two login phases)


class Pinger(Protocol):
    async def ping(self, timeout: float = 10.0) -> None: ...

    async def close(self) -> None: ...


@dataclass
class PathReport:
    """What happened to one path during the copy (times in seconds from the start)."""

    path: str
    transitions: list[tuple[float, str, str]] = field(default_factory=list)
    failover_window: float | None = None  # last progress -> extents taken by other paths
    detected_after: float | None = None  # last progress -> FAILED
    moved_extents: int = 0


@dataclass
class _Watch:
    report: PathReport
    counter: int = 0
    last_progress: float = 0.0
    moved: set[int] = field(default_factory=set)
    pinger: Pinger | None = None
    failed_progress: float = 0.0  # last progress before the failure
    real: int = 0  # bytes of completed commands at the last sample
    logins: set[asyncio.Future[Pinger]] = field(default_factory=set)  # under way
    rtt: float = 0.0  # the path's round trip, seconds, as its streams last measured it


class Actions(Protocol):
    """What the monitor asks of the engine."""

    def path_counter(self, path: str) -> int: ...

    def path_busy(self, path: str) -> bool: ...

    def path_rtt(self, path: str) -> float | None: ...

    def fail_path(self, path: str, reason: str) -> set[int]: ...

    async def recover_path(self, path: str) -> None: ...

    def still_queued(self, extents: set[int]) -> set[int]: ...

    def path_event(self, path: str, state: str, reason: str) -> None: ...


class PathMonitor:
    """Runs the health machine of a copy's paths and acts on its events."""

    def __init__(
        self,
        paths: list[str],
        actions: Actions,
        opener: Callable[[str], Awaitable[Pinger]],
        *,
        config: HealthConfig = DEFAULT_HEALTH,
        sample: float = SAMPLE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.actions, self.opener, self.config, self.sample = actions, opener, config, sample
        self.clock = clock
        self.started = clock()
        self.health = PathHealth(config)
        self.watch: dict[str, _Watch] = {}
        for path in paths:
            self.health.add_path(path, self.started)
            self.watch[path] = _Watch(PathReport(path), last_progress=self.started)
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()

    def reports(self) -> list[PathReport]:
        return [w.report for w in self.watch.values()]

    def state(self, path: str) -> PathState:
        return self.health.state(path)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._sampler())]
        self._tasks += [asyncio.create_task(self._heartbeats(p)) for p in self.watch]

    async def stop(self) -> None:
        for task in [*self._tasks, *self._background]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._background, return_exceptions=True)
        self._tasks = []
        await asyncio.gather(*(self._close_path(w) for w in self.watch.values()))

    async def _close_path(self, w: _Watch) -> None:
        await self._drop_logins(w)
        if w.pinger is not None:
            pinger, w.pinger = w.pinger, None
            await _close_quietly(pinger)

    # ------------------------------------------------------------ progress

    def sample_once(self) -> None:
        now = self.clock()
        for path, w in self.watch.items():
            real = self.actions.path_counter(path)
            up = self.health.state(path) is PathState.UP
            if up and not self.actions.path_busy(path):
                w.counter += 1  # idle: nothing to progress on, not suspect
            if real > w.real:
                w.real, w.last_progress = real, now
            rtt = self.actions.path_rtt(path)
            if rtt is not None:
                w.rtt = rtt
                self.health.set_rtt(path, now, rtt)
            self.health.progress(path, now, real + w.counter)
            if w.moved:
                w.moved = self.actions.still_queued(w.moved)
                if not w.moved and w.report.failover_window is None:
                    w.report.failover_window = round(now - w.failed_progress, 3)
        self._apply(self.health.tick(now))

    async def _sampler(self) -> None:
        while True:
            await asyncio.sleep(self.sample)
            self.sample_once()

    # ------------------------------------------------------------ heartbeats

    async def heartbeat_once(self, path: str) -> bool:
        """One heartbeat on ``path``: a ping on its session, logging in first if needed."""
        w = self.watch[path]
        timeout = self._wait(path, PING_RTTS)
        ok = True
        try:
            if w.pinger is None:
                w.pinger = await self._login(path, w)
            await w.pinger.ping(timeout)
        except Exception:  # any failure is a missed heartbeat
            ok = False
            if w.pinger is not None:
                self._spawn(_close_quietly(w.pinger))
                w.pinger = None
        self.health.heartbeat(path, self.clock(), ok)
        self._apply(self.health.tick(self.clock()))
        return ok

    async def _heartbeats(self, path: str) -> None:
        while True:
            started = self.clock()
            await self.heartbeat_once(path)
            probing = (
                self.health.state(path) is PathState.FAILED and self.watch[path].pinger is None
            )
            interval = RETRY if probing else self.config.hbspan
            await asyncio.sleep(max(0.0, interval - (self.clock() - started)))

    def _wait(self, path: str, rtts: float) -> float:
        """``hbspan``, or ``rtts`` of the path's round trips when that is longer (a ping
        waits behind its path's queue; a login is several round trips)."""
        return max(self.config.hbspan, rtts * self.watch[path].rtt)

    async def _login(self, path: str, w: _Watch) -> Pinger:
        """A heartbeat session on ``path``.  Starts a login and waits for it (``hbspan``,
        or ``RETRY`` on a failed path, whose earlier logins keep going meanwhile)."""
        wait = self._wait(path, LOGIN_RTTS)
        w.logins.add(asyncio.ensure_future(asyncio.wait_for(self.opener(path), 3 * wait)))
        failed = self.health.state(path) is PathState.FAILED
        done, _ = await asyncio.wait(
            w.logins, timeout=RETRY if failed else wait, return_when=asyncio.FIRST_COMPLETED
        )
        w.logins -= done
        opened = [t.result() for t in done if not t.cancelled() and t.exception() is None]
        for extra in opened[1:]:
            self._spawn(_close_quietly(extra))
        if opened:
            await self._drop_logins(w)  # the path answers: the other attempts are moot
            return opened[0]
        if not failed:
            await self._drop_logins(w)
        raise TimeoutError(f"no login on {path}")

    async def _drop_logins(self, w: _Watch) -> None:
        logins, w.logins = w.logins, set()
        for login in logins:
            login.cancel()
        for result in await asyncio.gather(*logins, return_exceptions=True):
            if not isinstance(result, BaseException):
                self._spawn(_close_quietly(result))

    # ------------------------------------------------------------ events

    def _apply(self, events: list[PathEvent]) -> None:
        for event in events:
            w = self.watch[event.path]
            w.report.transitions.append(
                (round(event.at - self.started, 3), event.new.value, event.reason)
            )
            self.actions.path_event(event.path, event.new.value, event.reason)
            if event.new is PathState.FAILED:
                w.failed_progress = w.last_progress
                w.report.detected_after = round(event.at - w.last_progress, 3)
                w.report.failover_window = None
                w.moved = self.actions.fail_path(event.path, event.reason)
                w.report.moved_extents += len(w.moved)
                if not w.moved:
                    w.report.failover_window = w.report.detected_after
            elif event.new is PathState.RECOVERED:
                self._spawn(self.actions.recover_path(event.path))

    def _spawn(self, job: Awaitable[None]) -> None:
        task = asyncio.ensure_future(job)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


async def _close_quietly(pinger: Pinger) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(pinger.close(), 2.0)
