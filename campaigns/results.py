"""The results of a campaign run: typed records, their JSON form, and the summary figures.

A :class:`CampaignRun` is what one execution of a campaign produced: the machine and
topology it ran on and one :class:`Run` per (scenario, repetition), with aggregate
intervals, per-stream samples, events and the run's figures. The records are the one
schema of a results file: the runner writes them, the coordinator validates uploads
and documents its API with them (``CampaignRun`` in its OpenAPI), the report reads
them. ``to_json()`` gives plain JSON data (every key always present); ``from_json()``
validates it (pydantic, from the records' annotations) and raises
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
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import ConfigDict, Field, Strict, StrictBool, StrictStr, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from reservoir.campaigns.errors import CampaignError
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
    "LabLateness",
    "Machine",
    "PathInfo",
    "ResultsError",
    "Run",
    "Sample",
    "Scenario",
    "Stream",
    "SummaryRow",
    "Topology",
    "format_lab_late",
    "format_results",
    "format_summary",
    "jain",
    "run_jain",
    "summary_rows",
    "window_means",
]

FORMAT_VERSION: Final = 1

TopologyKind = Literal["lab", "loopback", "real"]
Tool = Literal["iperf3", "reservoir", "gridftp", "xrdcp"]
PEER_TOOLS: tuple[Tool, ...] = ("gridftp", "xrdcp")
Pacing = Literal["off", "per-nic", "per-socket"]
Multilink = Literal["paths", "mptcp"]
Verify = Literal["storage", "receipt"]
EventKind = Literal["link-down", "link-up", "cap", "path-failed", "path-recovered", "note"]


class ResultsError(CampaignError):
    """Campaign results that do not match the schema; the message names the field."""


# --------------------------------------------------------------------------- schema
#
# The records below are the schema: each field's type and bounds are declared once, in
# its annotation, and pydantic validates JSON data against them (``_ADAPTER``). Numbers
# and strings are strict (no "3" for 3, no true for 1); unknown fields are refused.

_RECORD = ConfigDict(extra="forbid", allow_inf_nan=False)

Count = Annotated[int, Strict(), Field(ge=0)]
AtLeastOne = Annotated[int, Strict(), Field(ge=1)]
NonNegative = Annotated[float, Strict(), Field(ge=0)]
Fraction = Annotated[float, Strict(), Field(ge=0, le=1)]
Text = StrictStr


@dataclass(slots=True)
class Machine:
    __pydantic_config__ = _RECORD

    cores: AtLeastOne
    kernel: Text
    cc_available: list[Text]


@dataclass(slots=True)
class PathInfo:
    """One network path (link) of the topology."""

    __pydantic_config__ = _RECORD

    name: Text
    rate_bps: NonNegative
    rtt_ms: NonNegative
    loss: Annotated[Fraction, Field(description="fraction of packets")]


@dataclass(slots=True)
class Topology:
    __pydantic_config__ = _RECORD

    kind: TopologyKind
    spec: Annotated[Text | None, Field(description="the lab spec file, if any")]
    bottleneck_bps: Annotated[
        Annotated[float, Strict(), Field(gt=0)] | None,
        Field(description="the aggregate bottleneck; null on loopback"),
    ]
    paths: list[PathInfo] = field(default_factory=list)


@dataclass(slots=True)
class Scenario:
    """The settings one run used (the campaign's scenario after expansion)."""

    __pydantic_config__ = _RECORD

    name: Text
    tool: Tool
    streams: AtLeastOne
    pacing: Pacing = "off"
    pacing_rate_bps: NonNegative | None = None
    equalizer: Annotated[
        StrictBool | None, Field(description="null: not applicable (iperf3, gridftp, xrdcp)")
    ] = None
    multilink: Multilink = "paths"
    cc: Text = "cubic"
    size_bytes: Count | None = None
    duration_s: NonNegative | None = None
    loss: Fraction | None = None
    verify: Annotated[
        Verify | None,
        Field(description="null: not applicable (not reservoir), or results from before it"),
    ] = None

    @property
    def pairing_key(self) -> tuple[int, str, float | None, str, float | None]:
        """What a reservoir scenario and its iperf3 baseline share (as the campaign
        pairs them, _spec.baseline_for): not the multilink mode (iperf3 runs over paths
        only, so an MPTCP copy is compared with it too)."""
        return (self.streams, self.pacing, self.pacing_rate_bps, self.cc, self.loss)

    @property
    def peer_key(self) -> tuple[int, str, float | None]:
        """What a reservoir scenario and the gridftp and xrdcp scenarios it is compared
        with share: the streams (design section 6), cc and loss; the best of them over
        their pacing values counts (they run over paths only, without an equalizer)."""
        return (self.streams, self.cc, self.loss)


@dataclass(slots=True)
class Interval:
    """Aggregate goodput over the interval ending at ``t`` (about one second)."""

    __pydantic_config__ = _RECORD

    t: NonNegative
    bps: NonNegative


Share = Annotated[float | None, Field(description="share of the streams' time, 0..1")]
ShareOfInterval = Annotated[Fraction | None, Field(description="share of the interval, 0..1")]


@dataclass(slots=True)
class Sample:
    """One stream over the interval ending at ``t``: its rate and TCP state at ``t``."""

    __pydantic_config__ = _RECORD

    t: NonNegative
    bps: NonNegative
    cwnd_bytes: Count | None = None
    rtt_us: Count | None = None
    retransmits: Annotated[
        Count | None, Field(description="segments retransmitted during the interval")
    ] = None
    cap_segments: Annotated[
        AtLeastOne | None, Field(description="the equalizer's cwnd cap; null: uncapped")
    ] = None
    # shares of the interval (reservoir's agents, from TCP_INFO): data in flight or
    # queued, counting the stalls on the receiver's window and on the send buffer
    busy: ShareOfInterval = None
    rwnd_limited: ShareOfInterval = None
    sndbuf_limited: ShareOfInterval = None


@dataclass(slots=True)
class Stream:
    __pydantic_config__ = _RECORD

    id: Text
    path: Annotated[
        Text | None, Field(description="the topology path it ran on; null for MPTCP (all)")
    ]
    samples: list[Sample] = field(default_factory=list)
    mss_bytes: Annotated[
        AtLeastOne | None, Field(description="to draw caps (segments) on the cwnd scale")
    ] = None


@dataclass(slots=True)
class Event:
    __pydantic_config__ = _RECORD

    t: NonNegative
    kind: EventKind
    detail: Text = ""


@dataclass(slots=True)
class Failover:
    """A failover run's figures: seconds of aggregate throughput lost after the link went
    down, and how long after it came back its path carried traffic again (None: never)."""

    __pydantic_config__ = _RECORD

    lost_seconds: NonNegative
    back_after_s: NonNegative | None


@dataclass(slots=True)
class LabLateness:
    """What the lab's delay lines released late during a run: frames sent more than
    2 ms after their due time, and the latest of them. Any: the lab itself fell
    behind (the machine was busy), and the run's figures include that stall."""

    __pydantic_config__ = _RECORD

    frames: Count
    max_ms: NonNegative


@dataclass(slots=True)
class Run:
    """One repetition of one scenario."""

    __pydantic_config__ = _RECORD

    scenario: Scenario
    repetition: Count
    started: NonNegative
    seconds: NonNegative
    bytes: Count
    goodput_bps: NonNegative
    cpu_seconds: Annotated[
        NonNegative, Field(description="sender and receiver processes, user + system")
    ]
    verified: Annotated[
        StrictBool | None,
        Field(
            description="null: not verified (iperf3, or verification off); gridftp and "
            "xrdcp: whether the destination hashed to the source's digest"
        ),
    ] = None
    error: Text | None = None
    intervals: list[Interval] = field(default_factory=list)
    streams: list[Stream] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    failover: Failover | None = None
    jain: Annotated[
        Annotated[float, Strict(), Field(ge=0, le=1 + 1e-9)] | None,
        Field(description="over the middle 60% of the run; see run_jain()"),
    ] = None
    lab_late: Annotated[
        LabLateness | None,
        Field(description="null: no delay line (loopback, a real topology), or not asked"),
    ] = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(slots=True)
class CampaignRun:
    """What one execution of a campaign produced."""

    __pydantic_config__ = _RECORD

    campaign: Text
    run_id: Text
    started: NonNegative
    finished: Annotated[NonNegative | None, Field(description="null while the run is in progress")]
    machine: Machine
    topology: Topology
    runs: list[Run] = field(default_factory=list)
    version: Annotated[Literal[1], Field(description="the format; optional on input")] = (
        FORMAT_VERSION
    )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data, every key present."""
        data: dict[str, Any] = _ADAPTER.dump_python(self, mode="json")
        return data

    @classmethod
    def from_json(cls, data: Any) -> CampaignRun:
        """Validated records from JSON data; :class:`ResultsError` names the bad field."""
        if not isinstance(data, dict):
            raise ResultsError(f"results: expected an object, got {_kind(data)}")
        version = data.get("version")
        if version is not None and version != FORMAT_VERSION:
            raise ResultsError(f"version: unsupported results format {version!r}")
        try:
            result = _ADAPTER.validate_python({k: v for k, v in data.items() if k != "version"})
        except ValidationError as e:
            raise ResultsError(_first_error(e)) from None
        _check_invariants(result)
        return result

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


_ADAPTER: TypeAdapter[CampaignRun] = TypeAdapter(CampaignRun)


# --------------------------------------------------------------------------- validation


def _check_invariants(result: CampaignRun) -> None:
    """What the types cannot say: times in order, one scenario per name, unique ids."""
    if result.finished is not None and result.finished < result.started:
        raise ResultsError("finished: is before started")
    first: dict[str, tuple[int, Scenario]] = {}
    for i, r in enumerate(result.runs):
        where = f"runs[{i}]"
        j, sc = first.setdefault(r.scenario.name, (i, r.scenario))
        if sc != r.scenario:
            raise ResultsError(
                f"{where}.scenario: differs from runs[{j}].scenario of the same name {sc.name!r}"
            )
        _check_increasing(f"{where}.intervals", [x.t for x in r.intervals])
        seen: set[str] = set()
        for k, s in enumerate(r.streams):
            _check_increasing(f"{where}.streams[{k}].samples", [x.t for x in s.samples])
            if s.id in seen:
                raise ResultsError(f"{where}.streams[{k}].id: duplicate stream id {s.id!r}")
            seen.add(s.id)


def _check_increasing(where: str, ts: list[float]) -> None:
    for i in range(1, len(ts)):
        if ts[i] < ts[i - 1]:
            raise ResultsError(
                f"{where}[{i}].t: times must not decrease ({ts[i]:g} after {ts[i - 1]:g})"
            )


def _first_error(e: ValidationError) -> str:
    """The first of pydantic's errors as ``path: what is wrong`` in this file's words."""
    err = e.errors(include_url=False)[0]
    loc = err["loc"]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return f"{where or 'results'}: {_problem(err, in_list=bool(loc) and isinstance(loc[-1], int))}"


def _problem(err: ErrorDetails, *, in_list: bool) -> str:
    kind, value, ctx = err["type"], err["input"], err.get("ctx") or {}
    if kind == "missing":
        return "missing"
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        return "unknown field"
    if value is None and not in_list and kind.endswith("_type"):
        return "must not be null"
    expected = _EXPECTED.get(kind)
    if expected:
        return f"expected {expected}, got {_kind(value)}"
    if kind == "literal_error":
        choices = ", ".join(re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))
        return f"{value!r} is not one of {choices}"
    if kind == "finite_number":
        return f"must be finite, got {value}"
    for bound, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if bound in ctx:
            return f"must be {op} {ctx[bound]:g}, got {value:g}"
    return str(err["msg"])


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    # every boolean of the format may be null
    "bool_type": "true, false or null",
    "list_type": "a list",
    "dataclass_type": "an object",
}


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

    target: Annotated[str, Field(description="e.g. '>= 0.9'")]
    met: bool


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
    verification: Annotated[
        str | None, Field(description="reservoir: how it verified (storage or receipt)")
    ] = None


# design.md section 6, as (column, target text, predicate).
TARGET_BOTTLENECK = 0.9
TARGET_IPERF3 = 1.0
TARGET_IPERF3_LOOPBACK = 0.8
TARGET_PEERS = 1.15
TARGET_PEERS_LOOPBACK = 1.3
TARGET_PEERS_LOOPBACK_RECEIPT = 1.6  # receipt-verified (the data-path issue)
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
    baselines: dict[tuple[int, str, float | None, str, float | None], str] = {}
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
            verification=(sc.verify or "storage") if sc.tool == "reservoir" else None,
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
    the best peer (1.6 receipt-verified), no bottleneck; Jain only with the equalizer
    on."""
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
    beat = _peers_target(loopback, row.verification)
    check("of_peers", row.of_peers, f">= {beat:g}", lambda v: v >= beat)
    if sc.equalizer:
        check("jain", row.jain, f">= {TARGET_JAIN:g}", lambda v: v >= TARGET_JAIN)
    lost = f"< {TARGET_FAILOVER_S:g} s"
    check("failover_lost_s", row.failover_lost_s, lost, lambda v: v < TARGET_FAILOVER_S)
    check("back_after_s", row.back_after_s, f"< {TARGET_BACK_S:g} s", lambda v: v < TARGET_BACK_S)
    return replace(row, checks=checks)


def _peers_target(loopback: bool, verification: str | None) -> float:
    """What reservoir must reach against the best of gridftp and xrdcp."""
    if not loopback:
        return TARGET_PEERS
    return TARGET_PEERS_LOOPBACK_RECEIPT if verification == "receipt" else TARGET_PEERS_LOOPBACK


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


def format_lab_late(runs: Sequence[Run]) -> str | None:
    """A line naming the runs during which a delay line released frames late (the
    lab, not the tool, stalled: their figures are the lab's too); None if none did."""
    late = [(r, r.lab_late) for r in runs if r.lab_late is not None and r.lab_late.frames]
    if not late:
        return None
    named = "; ".join(
        f"{r.scenario.name} (run {r.repetition}): {lab.frames} frames, up to {lab.max_ms:.0f} ms"
        for r, lab in late
    )
    count = f"{len(late)} run{'' if len(late) == 1 else 's'}"
    return f"lab: the delay lines released frames late during {count}: {named}"


def format_results(result: CampaignRun) -> str:
    """The summary table of a campaign's results, then the runs the lab stalled in."""
    text = format_summary(summary_rows(result))
    late = format_lab_late(result.runs)
    return text if late is None else f"{text}\n{late}"


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
        "targets (design.md section 6; + met, * missed): "
        f"goodput >= {TARGET_BOTTLENECK:g} of the bottleneck, "
        ">= 1.0 of iperf3 (0.8 on loopback) and >= 1.15 of the best of gridftp and xrdcp "
        "with the same streams (/best-peer; 1.3 on loopback, 1.6 receipt-verified), "
        "Jain >= 0.98 with the equalizer, "
        "failover lost < 1 s, path back < 2 s; idle, rwnd-lim, sndbuf-lim: shares of the "
        "streams' time with nothing to send, stalled on the receiver's window, stalled on "
        "the send buffer (TCP_INFO), while the copy carried data (not its end check)"
    )
    return "\n".join(lines)
