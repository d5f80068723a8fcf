"""The matrix of a campaign and its expansion into scenarios.

``[matrix]`` gives each dimension one value or a list::

    tool = ["iperf3", "reservoir"]     # required
    streams = [4, 8, 16, 32]           # required, 1..256
    pacing = ["off", "per-nic"]        # default per-nic (the product's default)
    pacing_rate_mbit = [450]           # per NIC; default: the pacing plan's rates
    equalizer = [false, true]          # default true
    verify = ["storage", "receipt"]    # default storage
    multilink = ["paths", "mptcp"]     # default paths
    cc = ["bbr", "cubic"]              # default bbr
    loss = [0, 1e-4]                   # default: the lab spec's own loss
    duration_s = 30                    # iperf3's -t; needed with iperf3
    size = "2GiB"                      # reservoir's volume; needed with reservoir
    exclude = [{ tool = "iperf3", streams = 64 }]

The scenarios are the cartesian product, per tool, of the dimensions that apply to it;
the others are not multiplied, and are None in the scenario:

- iperf3 has no equalizer and no disk: ``equalizer`` and ``size`` do not apply; its
  length is ``duration_s``. Its ``multilink`` is always ``paths`` (one flow set per
  link: iperf3 3.12 here has no ``--mptcp``, added in 3.16, and mptcpize is not
  installed). Its ``pacing``: ``per-nic`` paces the source's NICs with the same plan as
  reservoir's, ``per-socket`` gives each stream ``--fq-rate``.
- reservoir copies ``size`` bytes disk to disk (verified): ``duration_s`` does not
  apply. ``verify`` is how its agents verify each extent (the transfer's
  ``verification``: storage or receipt); it applies to reservoir only. Scenario names
  say it (``verify_receipt``) only when the matrix has another value than the default
  storage alone, so the names of campaigns without the axis stay as they were; a
  ``[quick]`` subset names it as its matrix does.
- gridftp and xrdcp (the peers of design section 5) copy ``size`` bytes disk to disk
  like reservoir, ``streams`` being their parallelism (xrdcp takes at most 15: more
  are clamped, and the run says so). They have no equalizer, run over ``paths`` only
  (no MPTCP: one client per path, as iperf3), and cannot pace a socket: their
  ``pacing`` is ``off`` or ``per-nic`` (the pacing component's qdisc on the source's
  NICs), never ``per-socket``; a matrix whose pacing leaves them nothing is refused.
  Their congestion control is their namespaces' default, set to ``cc`` for the run.
  They need a lab or loopback topology (their servers run in the destination's
  namespace).
- ``pacing_rate_mbit`` applies only to paced scenarios (pacing not ``off``).

Each ``exclude`` entry removes the scenarios whose values equal all of the entry's
(e.g. ``{ tool = "iperf3", streams = 64 }``); an entry that removes nothing is an error.
The order is stable: loss first (a lab is built once per loss value), then tool,
streams, pacing, rate, equalizer, verify, multilink, cc, length, as listed in the file.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from reservoir.campaigns import _check as check
from reservoir.campaigns._scenario import (
    CC,
    MULTILINK,
    PACING,
    PEERS,
    TOOLS,
    VERIFY,
    Event,
    Multilink,
    Pacing,
    Scenario,
    Tool,
    Verify,
    scenario_name,
)

MAX_STREAMS = 256


def _tool(w: str, v: Any, e: list[str]) -> Tool | None:
    return cast("Tool | None", check.choice(w, v, TOOLS, e))


def _pacing(w: str, v: Any, e: list[str]) -> Pacing | None:
    return cast("Pacing | None", check.choice(w, v, PACING, e))


def _multilink(w: str, v: Any, e: list[str]) -> Multilink | None:
    return cast("Multilink | None", check.choice(w, v, MULTILINK, e))


def _verify(w: str, v: Any, e: list[str]) -> Verify | None:
    return cast("Verify | None", check.choice(w, v, VERIFY, e))


ITEMS: dict[str, Callable[[str, Any, list[str]], Any]] = {
    "tool": _tool,
    "streams": lambda w, v, e: check.integer(w, v, 1, MAX_STREAMS, e),
    "pacing": _pacing,
    "pacing_rate_mbit": lambda w, v, e: check.number(w, v, 0, 100_000, e, above=True),
    "equalizer": check.boolean,
    "verify": _verify,
    "multilink": _multilink,
    "cc": lambda w, v, e: check.choice(w, v, CC, e),
    "loss": lambda w, v, e: check.number(w, v, 0, 0.5, e),
    "duration_s": lambda w, v, e: check.number(w, v, 0, 86_400, e, above=True),
    "size": check.size,
}
DIMENSIONS = tuple(ITEMS)
LENGTHS: dict[str, tuple[Tool, ...]] = {
    "duration_s": ("iperf3",),
    "size": ("reservoir", *PEERS),
}
"""The dimension that gives the length of each tool's runs."""


def _and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _or(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


@dataclass(frozen=True)
class Matrix:
    tool: tuple[Tool, ...]
    streams: tuple[int, ...]
    pacing: tuple[Pacing, ...] = ("per-nic",)
    pacing_rate_mbit: tuple[float, ...] = ()
    """Empty: the pacing plan's rates (each path's capacity less the margin)."""
    equalizer: tuple[bool, ...] = (True,)
    verify: tuple[Verify, ...] = ("storage",)
    multilink: tuple[Multilink, ...] = ("paths",)
    cc: tuple[str, ...] = ("bbr",)
    loss: tuple[float, ...] = ()
    """Empty: the lab spec's own loss."""
    duration_s: tuple[float, ...] = ()
    size: tuple[int, ...] = ()
    exclude: tuple[dict[str, Any], ...] = ()
    verify_named: bool = False
    """Whether scenario names say the verification mode: set when ``verify`` is not the
    default storage alone, and kept by ``replace`` (a quick subset of storage only
    keeps the names of its matrix)."""

    def __post_init__(self) -> None:
        if self.verify != ("storage",):
            object.__setattr__(self, "verify_named", True)

    def dimension(self, name: str) -> tuple[Any, ...]:
        return cast("tuple[Any, ...]", getattr(self, name))

    def expand(
        self, events: tuple[Event, ...] = (), *, excluding: bool = True
    ) -> tuple[Scenario, ...]:
        points = self._points(events)
        if not excluding:
            return tuple(points)
        return tuple(s for s in points if not any(matches(x, s) for x in self.exclude))

    def _points(self, events: tuple[Event, ...]) -> Iterator[Scenario]:
        for loss, tool in itertools.product(self.loss or (None,), self.tool):
            for streams, pacing in itertools.product(self.streams, self.pacings(tool)):
                rates = self.pacing_rate_mbit if pacing != "off" else ()
                for rate, rest in itertools.product(rates or (None,), self._tool_dims(tool)):
                    equalizer, verify, multilink, cc, length = rest
                    point = Scenario(
                        name="",
                        tool=tool, streams=streams, pacing=pacing, pacing_rate_mbit=rate,
                        equalizer=equalizer, multilink=multilink, cc=cc, loss=loss,
                        duration_s=float(length) if tool == "iperf3" else None,
                        size_bytes=int(length) if tool != "iperf3" else None,
                        verify=verify, events=events,
                    )  # fmt: skip
                    name = scenario_name(point, verify=self.verify_named)
                    yield replace(point, name=name)

    def pacings(self, tool: Tool) -> tuple[Pacing, ...]:
        """The pacing values of one tool: the peers cannot pace a socket."""
        if tool in PEERS:
            return tuple(p for p in self.pacing if p != "per-socket")
        return self.pacing

    def _tool_dims(self, tool: Tool) -> Iterator[tuple[Any, ...]]:
        """(equalizer, verify, multilink, cc, length) of one tool."""
        if tool == "iperf3":
            return itertools.product((None,), (None,), ("paths",), self.cc, self.duration_s)
        if tool in PEERS:
            return itertools.product((None,), (None,), ("paths",), self.cc, self.size)
        return itertools.product(self.equalizer, self.verify, self.multilink, self.cc, self.size)


def matches(exclude: dict[str, Any], scenario: Scenario) -> bool:
    return all(scenario.value(k) == v for k, v in exclude.items())


def parse_matrix(data: Any, errors: list[str]) -> Matrix | None:
    t = check.table("matrix", data, errors)
    if t is None:
        return None
    check.unknown_keys("matrix", t, (*DIMENSIONS, "exclude"), errors)
    n_before = len(errors)  # an unknown key does not stop the checks of the others
    for key in ("tool", "streams"):
        if key not in t:
            errors.append(f"matrix.{key}: missing")
    dims: dict[str, Any] = {
        k: check.values(f"matrix.{k}", t[k], ITEMS[k], errors) for k in DIMENSIONS if k in t
    }
    tools = dims.get("tool") or ()
    for key, users in LENGTHS.items():
        using = [tool for tool in users if tool in tools]
        if using and key not in t:
            errors.append(f"matrix.{key}: missing (the length of {_and(using)} runs)")
        elif not using and key in t and tools:
            errors.append(
                f"matrix.{key}: applies to {_and(users)} only, and matrix.tool has no {_or(users)}"
            )
    if "pacing_rate_mbit" in t and dims.get("pacing") == ("off",):
        errors.append("matrix.pacing_rate_mbit: applies to paced scenarios, and pacing is only off")
    if dims.get("pacing") == ("per-socket",):
        for tool in (x for x in tools if x in PEERS):
            errors.append(
                f"matrix.pacing: {tool} cannot pace a socket (no option sets a socket's"
                " rate), and pacing is only per-socket; add off or per-nic"
            )
    if len(errors) > n_before or any(v is None for v in dims.values()):
        return None
    matrix = Matrix(**{k: v for k, v in dims.items() if v is not None})
    exclude = _excludes(t.get("exclude", []), matrix, errors)
    return None if exclude is None else replace(matrix, exclude=exclude)


def _excludes(value: Any, matrix: Matrix, errors: list[str]) -> tuple[dict[str, Any], ...] | None:
    if not isinstance(value, list) or not all(isinstance(x, dict) for x in value):
        errors.append('matrix.exclude: must be a list of tables, e.g. [{ tool = "iperf3" }]')
        return None
    n_before = len(errors)
    out = [_exclude(f"matrix.exclude[{i}]", x, matrix, errors) for i, x in enumerate(value)]
    if len(errors) > n_before:
        return None
    everything = matrix.expand(excluding=False)
    for i, x in enumerate(out):
        if not any(matches(x, s) for s in everything):
            errors.append(f"matrix.exclude[{i}]: matches no scenario")
    return tuple(out)


def _exclude(where: str, t: dict[str, Any], matrix: Matrix, errors: list[str]) -> dict[str, Any]:
    check.unknown_keys(where, t, DIMENSIONS, errors)
    if not t:
        errors.append(f"{where}: must name at least one dimension")
    out: dict[str, Any] = {}
    for k in sorted(set(t) & set(DIMENSIONS)):
        value = ITEMS[k](f"{where}.{k}", t[k], errors)
        if value is not None and value not in matrix.dimension(k):
            errors.append(f"{where}.{k}: {t[k]!r} is not in matrix.{k} {_shown(matrix, k)}")
        out[k] = value
    return out


def parse_quick(data: Any, matrix: Matrix | None, errors: list[str]) -> tuple[Matrix, int] | None:
    """``[quick]``: the matrix restricted to some of its values (each a subset of the
    matrix's), and ``repetitions`` (default 1); the matrix's exclude still applies.
    Without a valid matrix, only the quick table's own fields are checked."""
    t = check.table("quick", data, errors)
    if t is None:
        return None
    n_before = len(errors)
    keys = (*DIMENSIONS, "repetitions")
    check.unknown_keys("quick", t, keys, errors)
    reps = check.integer("quick.repetitions", t.get("repetitions", 1), 1, 100, errors)
    dims: dict[str, Any] = {}
    for k in sorted(set(t) & set(DIMENSIONS)):
        picked = check.values(f"quick.{k}", t[k], ITEMS[k], errors)
        for i, v in enumerate(picked or ()):
            if matrix is not None and v not in matrix.dimension(k):
                w = f"quick.{k}[{i}]" if isinstance(t[k], list) else f"quick.{k}"
                errors.append(f"{w}: {_show(k, v)} is not in matrix.{k} {_shown(matrix, k)}")
        dims[k] = picked
    if len(errors) > n_before or reps is None or matrix is None:
        return None
    return replace(matrix, **dims), reps


def _shown(matrix: Matrix, key: str) -> str:
    values = matrix.dimension(key)
    if not values:
        return "(not given)"
    return "(" + ", ".join(_show(key, v) for v in values) + ")"


def _show(key: str, value: Any) -> str:
    return check.format_size(value) if key == "size" else repr(value)
