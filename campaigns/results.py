"""The results of a campaign run: typed records, their JSON form, and the summary figures.

A :class:`CampaignRun` is what one execution of a campaign produced: the machine and
topology it ran on and one :class:`Run` per (scenario, repetition), with aggregate
intervals, per-stream samples, events and the run's figures. ``to_json()`` gives plain
JSON data (every key always present); ``from_json()`` validates it and raises
:class:`ResultsError` naming the field (``runs[2].streams[0].samples[5].bps: ...``).
``from_json(to_json(x)) == x`` exactly.

Time conventions: ``started``/``finished`` are Unix seconds; every ``t`` inside a run
(intervals, samples, events) is seconds since that run's ``started``, at the *end* of
the interval the value covers; rates are bits per second.

:func:`summary_rows` reduces a campaign run to one row per scenario (medians over its
repetitions) with the ratios of design.md section 6, and :func:`format_summary` prints
them as the plain-text table ``make bench`` shows.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args

from pydantic import Field

from reservoir.common.fairness import jain
from reservoir.common.store import write_atomic

__all__ = [
    "FORMAT_VERSION",
    "PEER_TOOLS",
    "CampaignRun",
    "Check",
    "Event",
    "Failover",
    "Interval",
    "Machine",
    "PathInfo",
    "ResultsError",
    "Run",
    "Sample",
    "Scenario",
    "Stream",
    "SummaryRow",
    "Topology",
    "format_summary",
    "jain",
    "run_jain",
    "summary_rows",
    "window_means",
]

FORMAT_VERSION = 1

TopologyKind = Literal["lab", "loopback", "real"]
Tool = Literal["iperf3", "reservoir", "gridftp", "xrdcp"]
PEER_TOOLS: tuple[Tool, ...] = ("gridftp", "xrdcp")
Pacing = Literal["off", "per-nic", "per-socket"]
Multilink = Literal["paths", "mptcp"]
Verify = Literal["storage", "receipt"]
EventKind = Literal["link-down", "link-up", "cap", "path-failed", "path-recovered", "note"]


class ResultsError(ValueError):
    """Campaign results that do not match the schema; the message names the field."""


# --------------------------------------------------------------------------- validation


class _Obj:
    """Typed access to one JSON object, with the path of each field for errors."""

    def __init__(self, data: Any, where: str, keys: Iterable[str]) -> None:
        self.where = where
        if not isinstance(data, dict):
            raise ResultsError(f"{where or 'results'}: expected an object, got {_kind(data)}")
        unknown = sorted(set(data) - set(keys))
        if unknown:
            raise ResultsError(f"{self.at(unknown[0])}: unknown field")
        self.data: dict[str, Any] = data

    def at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, msg: str) -> ResultsError:
        return ResultsError(f"{self.at(key)}: {msg}")

    def raw(self, key: str, *, optional: bool = False) -> Any:
        if key not in self.data:
            if optional:
                return None
            raise self.fail(key, "missing")
        value = self.data[key]
        if value is None and not optional:
            raise self.fail(key, "must not be null")
        return value

    def text(self, key: str, choices: tuple[str, ...] | None = None) -> str:
        value = self.raw(key)
        return self._str(key, value, choices)

    def opt_text(self, key: str) -> str | None:
        value = self.raw(key, optional=True)
        return None if value is None else self._str(key, value, None)

    def opt_choice(self, key: str, choices: tuple[str, ...]) -> str | None:
        value = self.raw(key, optional=True)
        return None if value is None else self._str(key, value, choices)

    def _str(self, key: str, value: Any, choices: tuple[str, ...] | None) -> str:
        if not isinstance(value, str):
            raise self.fail(key, f"expected a string, got {_kind(value)}")
        if choices is not None and value not in choices:
            raise self.fail(key, f"{value!r} is not one of {', '.join(choices)}")
        return value

    def integer(self, key: str, minimum: int | None = 0) -> int:
        return self._int(key, self.raw(key), minimum)

    def opt_integer(self, key: str, minimum: int | None = 0) -> int | None:
        value = self.raw(key, optional=True)
        return None if value is None else self._int(key, value, minimum)

    def _int(self, key: str, value: Any, minimum: int | None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected an integer, got {_kind(value)}")
        if minimum is not None and value < minimum:
            raise self.fail(key, f"must be >= {minimum}, got {value}")
        return value

    def num(self, key: str, lo: float | None = 0.0, hi: float | None = None) -> float:
        return self._num(key, self.raw(key), lo, hi)

    def opt_num(self, key: str, lo: float | None = 0.0, hi: float | None = None) -> float | None:
        value = self.raw(key, optional=True)
        return None if value is None else self._num(key, value, lo, hi)

    def _num(self, key: str, value: Any, lo: float | None, hi: float | None) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"expected a number, got {_kind(value)}")
        number = float(value)
        if not math.isfinite(number):
            raise self.fail(key, f"must be finite, got {number}")
        if lo is not None and number < lo:
            raise self.fail(key, f"must be >= {lo:g}, got {number:g}")
        if hi is not None and number > hi:
            raise self.fail(key, f"must be <= {hi:g}, got {number:g}")
        return number

    def opt_bool(self, key: str) -> bool | None:
        value = self.raw(key, optional=True)
        if value is None or isinstance(value, bool):
            return value
        raise self.fail(key, f"expected true, false or null, got {_kind(value)}")

    def items(self, key: str) -> list[tuple[str, Any]]:
        """The items of a list field with their paths (``key[i]``)."""
        value = self.raw(key)
        if not isinstance(value, list):
            raise self.fail(key, f"expected a list, got {_kind(value)}")
        return [(f"{self.at(key)}[{i}]", item) for i, item in enumerate(value)]

    def texts(self, key: str) -> list[str]:
        out = []
        for where, item in self.items(key):
            if not isinstance(item, str):
                raise ResultsError(f"{where}: expected a string, got {_kind(item)}")
            out.append(item)
        return out


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _names(tp: Any) -> tuple[str, ...]:
    return cast("tuple[str, ...]", get_args(tp))


# --------------------------------------------------------------------------- records


@dataclass(slots=True)
class Machine:
    cores: int
    kernel: str
    cc_available: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"cores": self.cores, "kernel": self.kernel, "cc_available": list(self.cc_available)}

    @classmethod
    def from_json(cls, data: Any, where: str = "machine") -> Machine:
        o = _Obj(data, where, ("cores", "kernel", "cc_available"))
        return cls(o.integer("cores", 1), o.text("kernel"), o.texts("cc_available"))


@dataclass(slots=True)
class PathInfo:
    """One network path (link) of the topology."""

    name: str
    rate_bps: float
    rtt_ms: float
    loss: float  # fraction of packets, 0..1

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rate_bps": self.rate_bps,
            "rtt_ms": self.rtt_ms,
            "loss": self.loss,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> PathInfo:
        o = _Obj(data, where, ("name", "rate_bps", "rtt_ms", "loss"))
        return cls(o.text("name"), o.num("rate_bps"), o.num("rtt_ms"), o.num("loss", 0.0, 1.0))


@dataclass(slots=True)
class Topology:
    kind: TopologyKind
    spec: str | None  # the lab spec file, if any
    bottleneck_bps: float | None  # the aggregate bottleneck; None on loopback
    paths: list[PathInfo] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "spec": self.spec,
            "bottleneck_bps": self.bottleneck_bps,
            "paths": [p.to_json() for p in self.paths],
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "topology") -> Topology:
        o = _Obj(data, where, ("kind", "spec", "bottleneck_bps", "paths"))
        bottleneck = o.opt_num("bottleneck_bps")
        if bottleneck == 0:
            raise o.fail("bottleneck_bps", "must be > 0 or null")
        return cls(
            cast("TopologyKind", o.text("kind", _names(TopologyKind))),
            o.opt_text("spec"),
            bottleneck,
            [PathInfo.from_json(item, w) for w, item in o.items("paths")],
        )


@dataclass(slots=True)
class Scenario:
    """The settings one run used (the campaign's scenario after expansion)."""

    name: str
    tool: Tool
    streams: int
    pacing: Pacing = "off"
    pacing_rate_bps: float | None = None
    equalizer: bool | None = None  # None: not applicable (iperf3, gridftp, xrdcp)
    multilink: Multilink = "paths"
    cc: str = "cubic"
    size_bytes: int | None = None
    duration_s: float | None = None
    loss: float | None = None
    verify: Verify | None = None  # None: not applicable (not reservoir), or results before it

    KEYS = (
        "name", "tool", "streams", "pacing", "pacing_rate_bps", "equalizer", "multilink", "cc",
        "size_bytes", "duration_s", "loss", "verify",
    )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.KEYS}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Scenario:
        o = _Obj(data, where, cls.KEYS)
        return cls(
            name=o.text("name"),
            tool=cast("Tool", o.text("tool", _names(Tool))),
            streams=o.integer("streams", 1),
            pacing=cast("Pacing", o.text("pacing", _names(Pacing))),
            pacing_rate_bps=o.opt_num("pacing_rate_bps"),
            equalizer=o.opt_bool("equalizer"),
            multilink=cast("Multilink", o.text("multilink", _names(Multilink))),
            cc=o.text("cc"),
            size_bytes=o.opt_integer("size_bytes"),
            duration_s=o.opt_num("duration_s"),
            loss=o.opt_num("loss", 0.0, 1.0),
            verify=cast("Verify | None", o.opt_choice("verify", _names(Verify))),
        )

    @property
    def pairing_key(self) -> tuple[int, str, str, float | None]:
        """What a reservoir scenario and its iperf3 baseline share: not the multilink
        mode (iperf3 runs over paths only, so an MPTCP copy is compared with it too)."""
        return (self.streams, self.pacing, self.cc, self.loss)

    @property
    def peer_key(self) -> tuple[int, str, float | None]:
        """What a reservoir scenario and the gridftp and xrdcp scenarios it is compared
        with share: the streams (design section 6), cc and loss; the best of them over
        their pacing values counts (they run over paths only, without an equalizer)."""
        return (self.streams, self.cc, self.loss)


@dataclass(slots=True)
class Interval:
    """Aggregate goodput over the interval ending at ``t`` (about one second)."""

    t: float
    bps: float

    def to_json(self) -> dict[str, Any]:
        return {"t": self.t, "bps": self.bps}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Interval:
        o = _Obj(data, where, ("t", "bps"))
        return cls(o.num("t"), o.num("bps"))


@dataclass(slots=True)
class Sample:
    """One stream over the interval ending at ``t``: its rate and TCP state at ``t``."""

    t: float
    bps: float
    cwnd_bytes: int | None = None
    rtt_us: int | None = None
    retransmits: int | None = None  # segments retransmitted during the interval
    cap_segments: int | None = None  # the equalizer's cwnd cap; None: uncapped
    # shares of the interval (reservoir's agents, from TCP_INFO): data in flight or
    # queued, counting the stalls on the receiver's window and on the send buffer
    busy: float | None = None
    rwnd_limited: float | None = None
    sndbuf_limited: float | None = None

    KEYS = (
        "t",
        "bps",
        "cwnd_bytes",
        "rtt_us",
        "retransmits",
        "cap_segments",
        "busy",
        "rwnd_limited",
        "sndbuf_limited",
    )

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.KEYS}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Sample:
        o = _Obj(data, where, cls.KEYS)
        return cls(
            o.num("t"),
            o.num("bps"),
            o.opt_integer("cwnd_bytes"),
            o.opt_integer("rtt_us"),
            o.opt_integer("retransmits"),
            o.opt_integer("cap_segments", 1),
            o.opt_num("busy", 0.0, 1.0),
            o.opt_num("rwnd_limited", 0.0, 1.0),
            o.opt_num("sndbuf_limited", 0.0, 1.0),
        )


@dataclass(slots=True)
class Stream:
    id: str
    path: str | None  # the topology path it ran on; None for MPTCP (all of them)
    samples: list[Sample] = field(default_factory=list)
    mss_bytes: int | None = None  # to draw caps (segments) on the cwnd (bytes) scale

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": self.path,
            "mss_bytes": self.mss_bytes,
            "samples": [s.to_json() for s in self.samples],
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> Stream:
        o = _Obj(data, where, ("id", "path", "mss_bytes", "samples"))
        samples = [Sample.from_json(item, w) for w, item in o.items("samples")]
        _check_increasing(o, "samples", [s.t for s in samples])
        return cls(o.text("id"), o.opt_text("path"), samples, o.opt_integer("mss_bytes", 1))


@dataclass(slots=True)
class Event:
    t: float
    kind: EventKind
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"t": self.t, "kind": self.kind, "detail": self.detail}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Event:
        o = _Obj(data, where, ("t", "kind", "detail"))
        kind = cast("EventKind", o.text("kind", _names(EventKind)))
        return cls(o.num("t"), kind, o.text("detail"))


@dataclass(slots=True)
class Failover:
    """A failover run's figures: seconds of aggregate throughput lost after the link went
    down, and how long after it came back its path carried traffic again (None: never)."""

    lost_seconds: float
    back_after_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {"lost_seconds": self.lost_seconds, "back_after_s": self.back_after_s}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Failover:
        o = _Obj(data, where, ("lost_seconds", "back_after_s"))
        return cls(o.num("lost_seconds"), o.opt_num("back_after_s"))


@dataclass(slots=True)
class Run:
    """One repetition of one scenario."""

    scenario: Scenario
    repetition: int
    started: float
    seconds: float
    bytes: int
    goodput_bps: float
    cpu_seconds: float  # sender and receiver processes, user + system
    verified: bool | None = None  # None: not verified (iperf3, or verification off);
    # gridftp and xrdcp: whether the destination hashed to the source's digest
    error: str | None = None
    intervals: list[Interval] = field(default_factory=list)
    streams: list[Stream] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    failover: Failover | None = None
    jain: float | None = None  # over the middle 60% of the run; see run_jain()

    KEYS = (
        "scenario", "repetition", "started", "seconds", "bytes", "goodput_bps", "cpu_seconds",
        "verified", "error", "intervals", "streams", "events", "failover", "jain",
    )  # fmt: skip

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.to_json(),
            "repetition": self.repetition,
            "started": self.started,
            "seconds": self.seconds,
            "bytes": self.bytes,
            "goodput_bps": self.goodput_bps,
            "cpu_seconds": self.cpu_seconds,
            "verified": self.verified,
            "error": self.error,
            "intervals": [i.to_json() for i in self.intervals],
            "streams": [s.to_json() for s in self.streams],
            "events": [e.to_json() for e in self.events],
            "failover": None if self.failover is None else self.failover.to_json(),
            "jain": self.jain,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> Run:
        o = _Obj(data, where, cls.KEYS)
        run = cls(
            scenario=Scenario.from_json(o.raw("scenario"), o.at("scenario")),
            repetition=o.integer("repetition"),
            started=o.num("started"),
            seconds=o.num("seconds"),
            bytes=o.integer("bytes"),
            goodput_bps=o.num("goodput_bps"),
            cpu_seconds=o.num("cpu_seconds"),
            verified=o.opt_bool("verified"),
            error=o.opt_text("error"),
        )
        run.intervals = [Interval.from_json(item, w) for w, item in o.items("intervals")]
        _check_increasing(o, "intervals", [i.t for i in run.intervals])
        run.streams = [Stream.from_json(item, w) for w, item in o.items("streams")]
        seen: set[str] = set()
        for i, s in enumerate(run.streams):
            if s.id in seen:
                raise ResultsError(f"{o.at('streams')}[{i}].id: duplicate stream id {s.id!r}")
            seen.add(s.id)
        run.events = [Event.from_json(item, w) for w, item in o.items("events")]
        failover = o.raw("failover", optional=True)
        if failover is not None:
            run.failover = Failover.from_json(failover, o.at("failover"))
        run.jain = o.opt_num("jain", 0.0, 1.0 + 1e-9)
        return run


def _check_increasing(o: _Obj, key: str, ts: list[float]) -> None:
    for i in range(1, len(ts)):
        if ts[i] < ts[i - 1]:
            raise ResultsError(
                f"{o.at(key)}[{i}].t: times must not decrease ({ts[i]:g} after {ts[i - 1]:g})"
            )


@dataclass(slots=True)
class CampaignRun:
    campaign: str
    run_id: str
    started: float
    finished: float | None  # None while the run is in progress
    machine: Machine
    topology: Topology
    runs: list[Run] = field(default_factory=list)

    KEYS = ("version", "campaign", "run_id", "started", "finished", "machine", "topology", "runs")

    def to_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "campaign": self.campaign,
            "run_id": self.run_id,
            "started": self.started,
            "finished": self.finished,
            "machine": self.machine.to_json(),
            "topology": self.topology.to_json(),
            "runs": [r.to_json() for r in self.runs],
        }

    @classmethod
    def from_json(cls, data: Any) -> CampaignRun:
        o = _Obj(data, "", cls.KEYS)
        version = o.raw("version", optional=True)
        if version is not None and version != FORMAT_VERSION:
            raise o.fail("version", f"unsupported results format {version!r}")
        campaign, run_id = o.text("campaign"), o.text("run_id")
        started = o.num("started")
        finished = o.opt_num("finished")
        if finished is not None and finished < started:
            raise o.fail("finished", "is before started")
        machine = Machine.from_json(o.raw("machine"))
        topology = Topology.from_json(o.raw("topology"))
        runs = [Run.from_json(item, w) for w, item in o.items("runs")]
        first: dict[str, tuple[int, Scenario]] = {}
        for i, r in enumerate(runs):
            j, sc = first.setdefault(r.scenario.name, (i, r.scenario))
            if sc != r.scenario:
                raise ResultsError(
                    f"runs[{i}].scenario: differs from runs[{j}].scenario of the same name "
                    f"{sc.name!r}"
                )
        return cls(campaign, run_id, started, finished, machine, topology, runs)

    def dumps(self, indent: int | None = None) -> str:
        return json.dumps(self.to_json(), indent=indent, allow_nan=False)

    @classmethod
    def loads(cls, text: str) -> CampaignRun:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ResultsError(f"not JSON: {e}") from None
        return cls.from_json(data)

    def save(self, path: Path) -> None:
        write_atomic(path, (self.dumps(indent=1) + "\n").encode(), mode=0o644)

    @classmethod
    def load(cls, path: Path) -> CampaignRun:
        try:
            text = path.read_text()
        except OSError as e:
            raise ResultsError(f"{path}: {e.strerror or e}") from None
        try:
            return cls.loads(text)
        except ResultsError as e:
            raise ResultsError(f"{path}: {e}") from None


# --------------------------------------------------------------------------- figures


def _duration(run: Run) -> float:
    if run.seconds > 0:
        return run.seconds
    ends = [s.samples[-1].t for s in run.streams if s.samples]
    return max(ends, default=0.0)


def window_means(run: Run, lo: float = 0.2, hi: float = 0.8) -> dict[str, float]:
    """Each stream's mean rate (bit/s) over ``[lo, hi]`` of the run's duration.

    A sample covers ``(previous t, t]`` (the first one ``(0, t]``); the mean weights
    each by its overlap with the window. A stream with no sample in the window gets 0.
    """
    if not 0 <= lo < hi:
        raise ValueError(f"window [{lo}, {hi}] is empty")
    total = _duration(run)
    w0, w1 = lo * total, hi * total
    means: dict[str, float] = {}
    for stream in run.streams:
        prev = 0.0
        weighted = covered = 0.0
        for s in stream.samples:
            overlap = min(s.t, w1) - max(prev, w0)
            if overlap > 0:
                weighted += s.bps * overlap
                covered += overlap
            prev = s.t
        means[stream.id] = weighted / covered if covered > 0 else 0.0
    return means


def run_jain(run: Run) -> float | None:
    """Jain's index of the per-stream means over the middle 60% (None without streams):
    what the runner stores in ``Run.jain``."""
    means = window_means(run)
    return jain(means.values()) if means else None


@dataclass(frozen=True, slots=True)
class Check:
    """A target of design.md section 6 that applies to a column, and whether it is met."""

    target: Annotated[str, Field(description="e.g. '>= 0.95'")]
    met: bool


Share = Annotated[float | None, Field(description="share of the streams' time, 0..1")]


@dataclass(frozen=True, slots=True)
class SummaryRow:
    """One scenario: medians over its repetitions that did not fail. The coordinator's
    API serves these rows as they are (``/campaigns/{id}``); the descriptions are its
    schema's."""

    scenario: str
    tool: Tool
    streams: int
    repetitions: int
    errors: int
    goodput_bps: float | None
    of_bottleneck: Annotated[float | None, Field(description="goodput / the aggregate bottleneck")]
    of_iperf3: Annotated[float | None, Field(description="goodput / the paired iperf3 baseline's")]
    baseline: Annotated[str | None, Field(description="the paired iperf3 scenario")]
    jain: float | None
    failover_lost_s: float | None
    back_after_s: float | None
    cpu_s_per_gb: float | None
    # shares of the streams' time (reservoir's TCP_INFO; medians of the runs' means):
    # nothing to send, stalled on the receiver's window, stalled on the send buffer
    idle: Share = None
    rwnd_limited: Share = None
    sndbuf_limited: Share = None
    checks: Annotated[
        dict[str, Check], Field(description="column -> the target there, met or not")
    ] = field(default_factory=dict)
    of_peers: Annotated[
        float | None,
        Field(
            description="reservoir: goodput / the best gridftp or xrdcp scenario's, same streams"
        ),
    ] = None
    peer: Annotated[str | None, Field(description="that gridftp or xrdcp scenario")] = None


# design.md section 6, as (column, target text, predicate).
TARGET_BOTTLENECK = 0.95
TARGET_IPERF3 = 1.0
TARGET_IPERF3_LOOPBACK = 0.8
TARGET_PEERS = 1.15
TARGET_PEERS_LOOPBACK = 1.3
TARGET_JAIN = 0.98
TARGET_FAILOVER_S = 1.0
TARGET_BACK_S = 2.0


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


MOVING = 0.01  # a stream moving 1% of its share of the goodput still carries data


def stream_limits(run: Run) -> tuple[float | None, float | None, float | None]:
    """The means over every stream's samples of the shares of time it was idle (had
    nothing to send), receive-window-limited and send-buffer-limited, while the copy
    carried data (see :func:`data_samples`); None where no sample says."""
    samples = data_samples(run)
    idle = [1.0 - s.busy for s in samples if s.busy is not None]
    rwnd = [s.rwnd_limited for s in samples if s.rwnd_limited is not None]
    sndbuf = [s.sndbuf_limited for s in samples if s.sndbuf_limited is not None]
    return _mean(idle), _mean(rwnd), _mean(sndbuf)


def data_samples(run: Run) -> list[Sample]:
    """Every stream's samples up to the last one in which some stream still moved data
    (at least 1% of its share of the goodput): the steady state and the start, not the
    end of a copy where it checks the whole destination and flushes, with nothing to
    send by design."""
    samples = [s for st in run.streams for s in st.samples]
    if not run.streams or not run.goodput_bps:
        return samples
    moving = MOVING * run.goodput_bps / len(run.streams)
    times = [s.t for s in samples if s.bps >= moving]
    if not times:
        return samples
    end = max(times)
    return [s for s in samples if s.t <= end]


def summary_rows(result: CampaignRun) -> list[SummaryRow]:
    """One row per scenario, in order of first appearance."""
    groups: dict[str, list[Run]] = {}
    for r in result.runs:
        groups.setdefault(r.scenario.name, []).append(r)
    goodput = {name: _median(r.goodput_bps for r in runs if r.ok) for name, runs in groups.items()}
    baselines: dict[tuple[int, str, str, float | None], str] = {}
    for name, runs in groups.items():
        if runs[0].scenario.tool == "iperf3":
            baselines.setdefault(runs[0].scenario.pairing_key, name)
    peers = best_peers(groups, goodput)
    loopback = result.topology.kind == "loopback"
    bottleneck = result.topology.bottleneck_bps

    rows = []
    for name, runs in groups.items():
        sc = runs[0].scenario
        ok = [r for r in runs if r.ok]
        baseline = baselines.get(sc.pairing_key) if sc.tool != "iperf3" else None
        peer = peers.get(sc.peer_key) if sc.tool == "reservoir" else None
        failovers = [r.failover for r in ok if r.failover is not None]
        limits = [stream_limits(r) for r in ok]
        row = SummaryRow(
            scenario=name,
            tool=sc.tool,
            streams=sc.streams,
            repetitions=len(runs),
            errors=len(runs) - len(ok),
            goodput_bps=goodput[name],
            of_bottleneck=_ratio(goodput[name], bottleneck),
            of_iperf3=_ratio(goodput[name], goodput[baseline]) if baseline else None,
            baseline=baseline,
            jain=_median(r.jain for r in ok),
            failover_lost_s=_median(f.lost_seconds for f in failovers),
            back_after_s=_median(f.back_after_s for f in failovers),
            cpu_s_per_gb=_median(r.cpu_seconds / (r.bytes / 1e9) for r in ok if r.bytes > 0),
            idle=_median(x[0] for x in limits),
            rwnd_limited=_median(x[1] for x in limits),
            sndbuf_limited=_median(x[2] for x in limits),
            of_peers=_ratio(goodput[name], goodput[peer]) if peer else None,
            peer=peer,
        )
        rows.append(_with_checks(row, sc, loopback=loopback))
    return rows


def best_peers(
    groups: dict[str, list[Run]], goodput: dict[str, float | None]
) -> dict[tuple[int, str, float | None], str]:
    """The gridftp or xrdcp scenario of highest median goodput for each peer key."""
    best: dict[tuple[int, str, float | None], str] = {}
    for name, runs in groups.items():
        sc, rate = runs[0].scenario, goodput[name]
        if sc.tool not in PEER_TOOLS or rate is None:
            continue
        current = best.get(sc.peer_key)
        if current is None or rate > (goodput[current] or 0.0):
            best[sc.peer_key] = name
    return best


def _with_checks(row: SummaryRow, sc: Scenario, *, loopback: bool) -> SummaryRow:
    """The section 6 targets that apply to this row (reservoir rows only: iperf3, gridftp
    and xrdcp are what it is measured against). Loopback: >= 0.8 of iperf3 and >= 1.3 of
    the best peer, no bottleneck; Jain only with the equalizer on."""
    if sc.tool != "reservoir":
        return row
    checks: dict[str, Check] = {}

    def check(column: str, value: float | None, text: str, ok: Callable[[float], bool]) -> None:
        if value is not None:
            checks[column] = Check(text, ok(value))

    if not loopback:
        check(
            "of_bottleneck",
            row.of_bottleneck,
            f">= {TARGET_BOTTLENECK:g}",
            lambda v: v >= TARGET_BOTTLENECK,
        )
    want = TARGET_IPERF3_LOOPBACK if loopback else TARGET_IPERF3
    check("of_iperf3", row.of_iperf3, f">= {want:g}", lambda v: v >= want)
    beat = TARGET_PEERS_LOOPBACK if loopback else TARGET_PEERS
    check("of_peers", row.of_peers, f">= {beat:g}", lambda v: v >= beat)
    if sc.equalizer:
        check("jain", row.jain, f">= {TARGET_JAIN:g}", lambda v: v >= TARGET_JAIN)
    lost = f"< {TARGET_FAILOVER_S:g} s"
    check("failover_lost_s", row.failover_lost_s, lost, lambda v: v < TARGET_FAILOVER_S)
    check("back_after_s", row.back_after_s, f"< {TARGET_BACK_S:g} s", lambda v: v < TARGET_BACK_S)
    return replace(row, checks=checks)


# (column, header, formatter) of the summary table, shared with the HTML report.
COLUMNS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("goodput_bps", "goodput Mbit/s", lambda v: f"{v / 1e6:.1f}"),
    ("of_bottleneck", "/bottleneck", lambda v: f"{v:.3f}"),
    ("of_iperf3", "/iperf3", lambda v: f"{v:.3f}"),
    ("of_peers", "/best-peer", lambda v: f"{v:.3f}"),
    ("jain", "Jain", lambda v: f"{v:.3f}"),
    ("failover_lost_s", "lost s", lambda v: f"{v:.2f}"),
    ("back_after_s", "back s", lambda v: f"{v:.2f}"),
    ("cpu_s_per_gb", "CPU s/GB", lambda v: f"{v:.2f}"),
    ("idle", "idle", lambda v: f"{v:.0%}"),
    ("rwnd_limited", "rwnd-lim", lambda v: f"{v:.0%}"),
    ("sndbuf_limited", "sndbuf-lim", lambda v: f"{v:.0%}"),
)


def cell(row: SummaryRow, column: str) -> str:
    """The formatted value of one figure column ("-" when it does not apply)."""
    for key, _, fmt in COLUMNS:
        if key == column:
            value = getattr(row, key)
            return "-" if value is None else fmt(value)
    raise KeyError(column)


def format_summary(rows: Sequence[SummaryRow]) -> str:
    """The rows as a plain-text table; a value that misses its design.md section 6
    target is marked ``*``, one that meets it ``+``."""
    header = ["scenario", "tool", "streams", "reps", *(h for _, h, _ in COLUMNS)]
    table = [header]
    for row in rows:
        reps = f"{row.repetitions}" + (f" ({row.errors} err)" if row.errors else "")
        figures = []
        for key, _, _ in COLUMNS:
            text = cell(row, key)
            check = row.checks.get(key)
            figures.append(text + ("" if check is None else " +" if check.met else " *"))
        table.append([row.scenario, row.tool, str(row.streams), reps, *figures])
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = []
    for n, line in enumerate(table):
        parts = [
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append(
        "targets (design.md section 6; + met, * missed): goodput >= 0.95 of the bottleneck, "
        ">= 1.0 of iperf3 (0.8 on loopback) and >= 1.15 of the best of gridftp and xrdcp "
        "with the same streams (/best-peer; 1.3 on loopback), Jain >= 0.98 with the equalizer, "
        "failover lost < 1 s, path back < 2 s; idle, rwnd-lim, sndbuf-lim: shares of the "
        "streams' time with nothing to send, stalled on the receiver's window, stalled on "
        "the send buffer (TCP_INFO), while the copy carried data (not its end check)"
    )
    return "\n".join(lines)
