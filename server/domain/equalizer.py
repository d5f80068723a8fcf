"""The stream equalizer (design section 3.2): per-connection cwnd caps that let slow
streams catch up without lowering the aggregate.

The paper's observation: with many parallel streams on a long path, per-stream rates
diverge and keep diverging; the fast ones fill the queues and the slow ones never
recover.  Capping the fast ones' windows lets the slow ones grow, and raised the
aggregate.  The control law, run every interval (>= 2 Hz) over one transfer's
streams, separately for every group of streams sharing a bottleneck (a path):

1. Each stream's rate ``r`` is smoothed (EWMA, ``alpha``) from its telemetry, with
   its smoothed RTT and MSS. A stream that carried nothing in the interval is left
   out of it: it waited on its application (between extents), and its zero would
   read as a starved stream, tighten every cap and pin the others at their share of
   a still small aggregate (what held a 350 ms path at half its rate).
2. The fair share is ``f = sum(r) / n`` and the fairness Jain's index
   ``J = sum(r)^2 / (n * sum(r^2))``. The share a cap is set from is
   ``s = max(sum(r), R) / n``, R being the reference aggregate (below): the share of
   what the bottleneck has carried, not of what it carries now. A cap set from ``f``
   would follow the aggregate down while the slow streams are still growing into the
   room (seconds, at 200 ms RTT) and so keep it down.
   While the group's aggregate is still ramping up (more than ``ramp_growth`` above
   what it was ``ramp_window`` intervals ago, or not yet that many intervals seen)
   no stream gets a new cap and ``m`` is held: streams in slow start differ for a
   while, and caps set from the small aggregate of a ramp stop it (at 350 ms RTT
   they cut a 1 Gbit/s aggregate to 0.4 for seconds).
3. A multiplier ``m >= 1`` says how far above the share a stream may run: a
   stream faster than ``(1 + tolerance) * f`` while ``J`` is below ``target`` is
   capped at the window that carries ``m * s`` at its own RTT,
   ``max(min_cwnd, m * s * srtt / mss)`` segments, and stays capped (the cap
   following ``s``) while caps are in force; the others are not capped, so they
   grow into the room the fast ones leave.
4. ``m`` adapts on the aggregate, AIMD style: when the smoothed aggregate stays
   below ``(1 - drop)`` of the reference R (the best smoothed aggregate of the last
   ``memory`` intervals) for ``patience`` intervals, the caps cost throughput: ``m``
   grows by ``relax``, and that ``m`` becomes the floor tightening stops at (the
   floor sinks back to 1 by ``floor_decay`` an interval, so caps are tried again
   later, like TCP's ssthresh). While the aggregate is below R but not for that
   long, ``m`` is held: a slow stream at 200 ms RTT needs seconds to take the room.
   When nearly every stream (``bound_share``) runs at its cap, no uncapped stream is
   left to take the room: the caps set the aggregate (a ramp still under way), so
   ``m`` grows by ``relax``. Otherwise, while ``J`` is below ``target``, ``m``
   shrinks by ``tighten`` (never below the floor); once fair, ``m`` grows slowly by
   ``drift`` so caps lift when they are no longer needed (a capped stream at
   ``m_max`` is uncapped).
5. Only a cap that appears, disappears or moves by more than ``change`` (relative) is
   pushed; each is a :class:`Decision`, which the caller records as an event.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reservoir.common.fairness import jain

HEADERS = 52  # IPv4 + TCP with timestamps: MSS = MTU - 52


@dataclass(frozen=True, slots=True)
class EqualizerConfig:
    alpha: float = 0.5  # EWMA weight of the newest rate sample
    tolerance: float = 0.05  # streams within this of the fair share are left alone
    min_cwnd: int = 10  # segments: never cap below the initial window
    tighten: float = 0.9
    relax: float = 1.1
    drift: float = 1.02
    m_start: float = 1.5
    m_max: float = 3.0
    drop: float = 0.03  # aggregate loss that counts as caused by the caps
    target: float = 0.98  # Jain's index that counts as fair
    change: float = 0.05  # smaller cap moves are not pushed
    step_down: float = 1.0  # a cap takes at most this fraction off a window per interval
    memory: int = 40  # intervals the reference aggregate looks back
    patience: int = 8  # intervals the aggregate stays low before the caps loosen
    floor_decay: float = 0.998  # per interval, the floor of the multiplier sinks to 1
    bound: float = 0.9  # a stream at this fraction of its cap's rate runs at its cap
    bound_share: float = 0.9  # with this share of the streams at their caps, loosen
    ramp_growth: float = 0.1  # an aggregate this much above ramp_window ago is ramping
    ramp_window: int = 4  # intervals

    def __post_init__(self) -> None:
        if not 0 < self.alpha <= 1:
            raise ValueError("alpha must be in (0, 1]")
        if not 0 < self.tighten < 1 < self.relax or self.drift < 1:
            raise ValueError("need tighten < 1 < relax and drift >= 1")
        if not 1 <= self.m_start <= self.m_max:
            raise ValueError("need 1 <= m_start <= m_max")
        if self.min_cwnd < 1 or self.memory < self.ramp_window or self.ramp_window < 1:
            raise ValueError("need min_cwnd, ramp_window >= 1 and memory >= ramp_window")


@dataclass(frozen=True, slots=True)
class StreamSample:
    """One stream's telemetry for one interval."""

    stream: str
    group: str  # the bottleneck it shares (its path)
    rate: float  # bytes per second
    srtt: float  # seconds
    mss: int  # bytes

    @classmethod
    def from_record(cls, record: Mapping[str, Any], group: str | None = None) -> StreamSample:
        """From a telemetry record (iperf3 names: bits_per_second, rtt in us, pmtu)."""
        pmtu = int(record.get("pmtu") or 1500)
        return cls(
            stream=str(record["stream"]),
            group=group if group is not None else str(record.get("path", "")),
            rate=float(record["bits_per_second"]) / 8,
            srtt=float(record["rtt"]) / 1e6,
            mss=max(1, pmtu - HEADERS),
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """A cap set (``new`` segments), moved or lifted (``new`` None) on one stream."""

    time: float
    stream: str
    group: str
    old: int | None
    new: int | None
    fair_share: float  # bytes per second: the share the cap was set from
    jain: float
    aggregate: float  # bytes per second, smoothed
    multiplier: float
    reason: str


@dataclass(frozen=True, slots=True)
class _Interval:
    """A group's figures for one interval, carried into its decisions."""

    now: float
    fair: float
    share: float  # what caps are set from: the reference aggregate's fair share
    jain: float
    aggregate: float
    multiplier: float
    reason: str
    ramping: bool


@dataclass
class _Group:
    multiplier: float
    rates: dict[str, float] = field(default_factory=dict)  # smoothed
    aggregates: deque[float] = field(default_factory=deque)
    low: int = 0  # consecutive intervals with the aggregate below its reference
    floor: float = 1.0  # tightening stops here: where caps last cost the aggregate


class Equalizer:
    """The control law's state for one transfer; :meth:`step` once per interval."""

    def __init__(self, config: EqualizerConfig | None = None) -> None:
        self.config = config or EqualizerConfig()
        self.caps: dict[str, int] = {}  # stream -> cwnd cap in segments
        self._groups: dict[str, _Group] = {}

    def step(self, samples: Iterable[StreamSample], now: float) -> list[Decision]:
        """Feeds one interval's samples; returns the cap changes to push."""
        by_group: dict[str, list[StreamSample]] = {}
        for sample in samples:
            by_group.setdefault(sample.group, []).append(sample)
        decisions: list[Decision] = []
        for name, group_samples in sorted(by_group.items()):
            decisions += self._step_group(name, group_samples, now)
        return decisions

    def forget(self, stream: str) -> None:
        """A stream that ended: its cap and smoothed rate go."""
        self.caps.pop(stream, None)
        for group in self._groups.values():
            group.rates.pop(stream, None)

    # ------------------------------------------------------------ one group

    def _step_group(self, name: str, samples: list[StreamSample], now: float) -> list[Decision]:
        cfg = self.config
        group = self._groups.setdefault(name, _Group(cfg.m_start))
        samples = [s for s in samples if s.rate > 0]  # idle this interval: step 1 above
        if not samples:
            return []
        for s in samples:
            old = group.rates.get(s.stream)
            group.rates[s.stream] = (
                s.rate if old is None else cfg.alpha * s.rate + (1 - cfg.alpha) * old
            )
        rates = [group.rates[s.stream] for s in samples]
        aggregate = sum(rates)
        fair, index = aggregate / len(rates), jain(rates)
        reference = max(group.aggregates, default=aggregate)
        ramping = self._ramping(group, aggregate)
        reason = self._adapt(group, aggregate, index, self._bound(samples, rates), ramping)
        share = max(aggregate, reference) / len(rates)
        interval = _Interval(now, fair, share, index, aggregate, group.multiplier, reason, ramping)
        decisions = []
        for s, rate in zip(samples, rates, strict=True):
            wanted = self._cap_for(s, rate, interval)
            decision = self._change(s, wanted, interval)
            if decision is not None:
                decisions.append(decision)
        return decisions

    def _bound(self, samples: list[StreamSample], rates: list[float]) -> float:
        """The share of the group's streams that run at their caps (within
        ``bound``): the caps, not the path, are what holds those back."""
        cfg, at_cap = self.config, 0
        for s, rate in zip(samples, rates, strict=True):
            cap = self.caps.get(s.stream)
            if cap is not None and s.srtt > 0 and rate >= cfg.bound * cap * s.mss / s.srtt:
                at_cap += 1
        return at_cap / len(samples)

    def _ramping(self, group: _Group, aggregate: float) -> bool:
        """Whether the group's aggregate is still ramping up (see step 2)."""
        window = self.config.ramp_window
        if len(group.aggregates) < window:
            return True
        return aggregate > (1 + self.config.ramp_growth) * group.aggregates[-window]

    def _adapt(
        self, group: _Group, aggregate: float, index: float, bound: float, ramping: bool
    ) -> str:
        """Moves the group's multiplier; says why."""
        cfg = self.config
        reference = max(group.aggregates, default=aggregate)
        group.aggregates.append(aggregate)
        if len(group.aggregates) > cfg.memory:
            group.aggregates.popleft()
        group.low = group.low + 1 if aggregate < (1 - cfg.drop) * reference else 0
        group.floor = max(1.0, group.floor * cfg.floor_decay)
        if group.low >= cfg.patience:
            group.low = 0
            group.multiplier = min(cfg.m_max, group.multiplier * cfg.relax)
            group.floor = group.multiplier
            return "aggregate below its reference: caps loosened"
        if group.low:
            return "aggregate below its reference: caps held"
        if ramping:
            return "aggregate ramping up: caps held, none new"
        if bound >= cfg.bound_share:
            group.multiplier = min(cfg.m_max, group.multiplier * cfg.relax)
            return "most streams run at their caps: caps loosened"
        if index < cfg.target:
            group.multiplier = max(group.floor, group.multiplier * cfg.tighten)
            return "streams unequal: caps tightened"
        group.multiplier = min(cfg.m_max, group.multiplier * cfg.drift)
        return "fair: caps loosened slowly"

    def _cap_for(self, s: StreamSample, rate: float, at: _Interval) -> int | None:
        """A capped stream stays capped (its cap follows the fair share) until the
        multiplier reaches ``m_max``; an uncapped one is capped once it runs faster
        than ``(1 + tolerance)`` times the fair share while the group is not fair
        (no new caps while Jain's index is at the target: during a ramp-up, say)."""
        cfg = self.config
        m = at.multiplier
        if m >= cfg.m_max or s.srtt <= 0:
            return None
        if s.stream not in self.caps and (
            rate <= (1 + cfg.tolerance) * at.fair or at.jain >= cfg.target or at.ramping
        ):
            return None
        window = rate * s.srtt / s.mss
        wanted = max(m * at.share * s.srtt / s.mss, (1 - cfg.step_down) * window)
        return max(cfg.min_cwnd, round(wanted))

    def _change(self, s: StreamSample, wanted: int | None, at: _Interval) -> Decision | None:
        old = self.caps.get(s.stream)
        if old == wanted:
            return None
        if old is not None and wanted is not None and abs(wanted - old) <= self.config.change * old:
            return None
        if wanted is None:
            del self.caps[s.stream]
        else:
            self.caps[s.stream] = wanted
        return Decision(
            at.now,
            s.stream,
            s.group,
            old,
            wanted,
            at.share,
            at.jain,
            at.aggregate,
            at.multiplier,
            at.reason,
        )
