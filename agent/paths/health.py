"""Per-path failure detection after RI2N (design section 3.4): a pure state machine.

RI2N detected a failed link per *endpoint* by comparing packet counters across endpoints.
In Reservoir a path (local address -> remote address) is the endpoint, the counter counts
acked-byte progress of the path's TCP streams, and iSCSI NOP-Out/NOP-In are the heartbeats.
Nothing here does I/O or reads a clock: callers pass ``now`` (seconds, monotonic).

Parameters (:class:`HealthConfig`, defaults from the RI2N paper):

- ``FT_HTHRESH = 10``: a path whose counter *passes* (exceeds) it has clearly progressed;
- ``FT_LTHRESH = 1``: a path whose counter stays ``<=`` it has (almost) not;
- ``SLOW_TOUT = 100 ms``: how long such a path must have been silent;
- ``HBSPAN = 2 s``: heartbeat period (the caller's NOP-Out cadence);
- ``HBWEIGHT = 3``: one answered heartbeat counts as 3 units of progress;
- ``HB_MISS_LIMIT = 3``: consecutive unanswered heartbeats that fail a path on their own.

Control law, evaluated by :meth:`PathHealth.tick`:

1. ``progress(p, now, acked)``: if ``acked`` grew since the last call, ``count[p] += 1``
   and ``heard[p] = now``. ``heartbeat(p, now, ok=True)``: ``count[p] += HBWEIGHT``,
   ``heard[p] = now``; ``ok=False`` increments ``missed[p]`` (reset by any answer).
2. Comparison rule: when some path ``q`` has ``count[q] > FT_HTHRESH``, every UP path ``p``
   with ``count[p] <= FT_LTHRESH`` and ``now - heard[p] >= SLOW_TOUT`` goes UP -> FAILED
   ("silent for X ms while path q progressed"). Once no UP path is such a suspect, all
   counters restart from 0, so they always measure recent activity; while a suspect is
   still within SLOW_TOUT the counters are kept, so it fails as soon as the timeout expires.
   On a long or slow path SLOW_TOUT is scaled up (:meth:`PathHealth.silence_limit`):
   at least ``rtt_factor`` of its round trips and ``gap_factor`` of its usual gap
   between units of progress, and ``startup_rtts`` round trips before its first one,
   so a 350 ms path still logging in is not failed by a 10 ms one that already runs.
   Two idle paths never pass FT_HTHRESH, hence never fail each other. Detection latency
   is SLOW_TOUT plus at most the time the other path needs to gather FT_HTHRESH units in
   a fresh window (e.g. 130 ms with A progressing every 10 ms). Fed by the 2 Hz telemetry,
   one unit per stream and sample, a path of n streams gathers 11 units in 5.5/n s: lower
   ``ft_hthresh`` (and raise ``slow_tout``) accordingly.
3. Heartbeat rule: ``missed[p] >= HB_MISS_LIMIT`` fails an UP path. This is the only rule
   for a single path (there is no other endpoint to compare with) and also catches a dead
   path among idle ones; it fires after about ``HB_MISS_LIMIT x HBSPAN`` (6 s).
4. Recovery: an answered heartbeat on a FAILED path makes it RECOVERED (its streams can be
   reopened); the next progress or answered heartbeat on it makes it UP again.

RI2N's FAST_TOUT (20 ms) is not used: with TCP streams, acks already smooth the counter.
Every transition is reported once by :meth:`PathHealth.tick` as a :class:`PathEvent`
carrying the time of the input that caused it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["HealthConfig", "PathEvent", "PathHealth", "PathState"]


class PathState(enum.Enum):
    """Health of one path."""

    UP = "up"
    FAILED = "failed"
    RECOVERED = "recovered"


@dataclass(frozen=True, slots=True)
class HealthConfig:
    """Thresholds of the control law (RI2N names; times in seconds)."""

    ft_hthresh: int = 10
    ft_lthresh: int = 1
    slow_tout: float = 0.100
    hbspan: float = 2.0
    hbweight: int = 3
    hb_miss_limit: int = 3
    rtt_factor: float = 4.0
    """A path is silent only after this many of its round trips (:meth:`PathHealth.set_rtt`) ..."""
    gap_factor: float = 4.0
    """... and this many of its usual gaps between two units of progress ..."""
    startup_rtts: float = 16.0
    """... and, before its first progress, this many round trips (login, slow start)."""

    def __post_init__(self) -> None:
        if self.ft_lthresh >= self.ft_hthresh:
            raise ValueError("ft_lthresh must be below ft_hthresh")
        if self.slow_tout <= 0 or self.hbspan <= 0:
            raise ValueError("slow_tout and hbspan must be positive")
        if self.hbweight < 1 or self.hb_miss_limit < 1:
            raise ValueError("hbweight and hb_miss_limit must be at least 1")
        if min(self.rtt_factor, self.gap_factor, self.startup_rtts) < 0:
            raise ValueError("rtt_factor, gap_factor and startup_rtts must not be negative")


@dataclass(frozen=True, slots=True)
class PathEvent:
    """A state transition of ``path`` at time ``at`` (seconds, caller's clock)."""

    path: str
    at: float
    old: PathState
    new: PathState
    reason: str


GAP_WEIGHT = 0.125  # EWMA weight of a new gap between progress units (as TCP's srtt)


@dataclass
class _Path:
    heard: float
    state: PathState = PathState.UP
    count: int = 0
    missed: int = 0
    acked: int | None = None
    pending: list[PathEvent] = field(default_factory=list)
    rtt: float = 0.0  # seconds; 0: not known
    gap: float = 0.0  # seconds between units of progress, smoothed; 0: none yet
    progressed: bool = False  # since it was added (or last recovered)
    last_unit: float = 0.0  # when progress last grew


class PathHealth:
    """RI2N-style health of a set of paths; see the module docstring for the law."""

    def __init__(self, config: HealthConfig | None = None) -> None:
        self.config = config or HealthConfig()
        self._paths: dict[str, _Path] = {}

    def add_path(self, path: str, now: float) -> None:
        """Watch ``path`` (UP, heard at ``now``); known paths are left as they are."""
        self._paths.setdefault(path, _Path(heard=now))

    def remove_path(self, path: str) -> None:
        """Stop watching ``path``."""
        self._paths.pop(path, None)

    def state(self, path: str) -> PathState:
        """Current state of ``path`` (KeyError if unknown)."""
        return self._paths[path].state

    def states(self) -> dict[str, PathState]:
        """Current state of every path."""
        return {name: p.state for name, p in self._paths.items()}

    def counter(self, path: str) -> int:
        """Current RI2N counter of ``path`` (for logs and tests)."""
        return self._paths[path].count

    def set_rtt(self, path: str, now: float, rtt: float) -> None:
        """The path's round trip now (seconds, e.g. its streams' smoothed RTT with their
        queueing): its silence is judged on that scale."""
        self._get(path, now).rtt = max(0.0, rtt)

    def silence_limit(self, path: str) -> float:
        """How long ``path`` may be silent before the comparison rule fails it:
        ``slow_tout``, or more on a path whose round trip (``rtt_factor`` of them) or
        usual gap between units of progress (``gap_factor``) is longer; before its
        first progress, ``startup_rtts`` round trips (a login and slow start at 350 ms
        take seconds)."""
        cfg, p = self.config, self._paths[path]
        limit = max(cfg.slow_tout, cfg.rtt_factor * p.rtt, cfg.gap_factor * p.gap)
        return limit if p.progressed else max(limit, cfg.startup_rtts * p.rtt)

    def progress(self, path: str, now: float, acked_bytes: int) -> None:
        """Report the path's cumulative acked bytes; growth counts one unit of progress."""
        p = self._get(path, now)
        grew = p.acked is not None and acked_bytes > p.acked
        p.acked = acked_bytes
        if grew:
            if p.progressed:
                gap = now - p.last_unit
                p.gap = gap if p.gap == 0 else p.gap + GAP_WEIGHT * (gap - p.gap)
            p.progressed, p.last_unit = True, now
            self._heard(path, p, now, 1)

    def heartbeat(self, path: str, now: float, ok: bool) -> None:
        """Report a heartbeat (NOP-Out) outcome: answered (``ok``) or timed out."""
        p = self._get(path, now)
        if not ok:
            p.missed += 1
            return
        was_failed = p.state is PathState.FAILED
        self._heard(path, p, now, self.config.hbweight, resume=not was_failed)
        if was_failed:
            p.progressed = False  # its streams log in and start slowly again
            self._move(path, p, now, PathState.RECOVERED, "heartbeat answered on failed path")

    def tick(self, now: float) -> list[PathEvent]:
        """Apply the failure rules at ``now``; return every transition since the last tick."""
        self._compare(now)
        self._missed_heartbeats(now)
        events: list[PathEvent] = []
        for p in self._paths.values():
            events.extend(p.pending)
            p.pending.clear()
        events.sort(key=lambda e: e.at)
        return events

    def _get(self, path: str, now: float) -> _Path:
        self.add_path(path, now)
        return self._paths[path]

    def _heard(self, path: str, p: _Path, now: float, weight: int, resume: bool = True) -> None:
        p.count += weight
        p.heard = now
        p.missed = 0
        if resume and p.state is PathState.RECOVERED:
            self._move(path, p, now, PathState.UP, "traffic resumed after recovery")

    @staticmethod
    def _move(path: str, p: _Path, now: float, new: PathState, reason: str) -> None:
        p.pending.append(PathEvent(path, now, p.state, new, reason))
        p.state = new

    def _compare(self, now: float) -> None:
        cfg = self.config
        high = [n for n, p in self._paths.items() if p.count > cfg.ft_hthresh]
        if not high:
            return
        suspects = [
            (n, p)
            for n, p in self._paths.items()
            if p.state is PathState.UP and n not in high and p.count <= cfg.ft_lthresh
        ]
        waiting = False
        for name, p in suspects:
            silent = now - p.heard
            if silent >= self.silence_limit(name):
                reason = f"silent for {silent * 1000:.0f} ms while path {high[0]} progressed"
                self._move(name, p, now, PathState.FAILED, reason)
            else:
                waiting = True
        if not waiting:
            for p in self._paths.values():
                p.count = 0

    def _missed_heartbeats(self, now: float) -> None:
        limit = self.config.hb_miss_limit
        for name, p in self._paths.items():
            if p.state is PathState.UP and p.missed >= limit:
                self._move(name, p, now, PathState.FAILED, f"{p.missed} heartbeats missed")
