"""One point of a campaign's matrix (:class:`Scenario`) and the events of a run
(:class:`Event`), with the scenario's stable name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from reservoir.campaigns._check import format_size

Tool = Literal["iperf3", "reservoir", "gridftp", "xrdcp"]
Pacing = Literal["off", "per-nic", "per-socket"]
Multilink = Literal["paths", "mptcp"]
Verify = Literal["storage", "receipt"]
Action = Literal["link-down", "link-up", "loss"]

TOOLS: tuple[Tool, ...] = ("iperf3", "reservoir", "gridftp", "xrdcp")
PEERS: tuple[Tool, ...] = ("gridftp", "xrdcp")
"""The transfer tools Reservoir is compared with (design section 5): they copy ``size``
disk to disk like reservoir, with ``streams`` as their parallelism."""
PACING: tuple[Pacing, ...] = ("off", "per-nic", "per-socket")
MULTILINK: tuple[Multilink, ...] = ("paths", "mptcp")
VERIFY: tuple[Verify, ...] = ("storage", "receipt")
"""How reservoir's agents verify each extent (a transfer's ``verification``)."""
CC = ("bbr", "cubic", "reno")  # what this kernel has built in (design section 4)
ACTIONS: tuple[Action, ...] = ("link-down", "link-up", "loss")


@dataclass(frozen=True)
class Event:
    """At ``at_s`` seconds after the transfer starts, ``action`` on the topology's
    ``link``. ``loss`` is a known action that campaigns refuse (the delay line takes its
    loss rate when it starts): ``value`` is kept for it, and is None for link-down/up."""

    at_s: float
    action: Action
    link: str
    value: float | None = None


@dataclass(frozen=True)
class Scenario:
    """One fully expanded point of the matrix. A field that does not apply to the tool
    is None: ``equalizer``, ``verify`` and ``size_bytes`` for iperf3, ``equalizer`` and
    ``verify`` for gridftp and xrdcp, ``duration_s`` for reservoir, gridftp and xrdcp,
    ``pacing_rate_mbit`` when pacing is off or the pacing plan's own rates are used;
    ``loss`` when the lab spec's own loss is kept."""

    name: str
    tool: Tool
    streams: int
    pacing: Pacing
    pacing_rate_mbit: float | None
    """Per NIC (path), Mbit/s; per-socket splits it evenly over the NIC's streams."""
    equalizer: bool | None
    multilink: Multilink
    cc: str
    loss: float | None
    """Random loss set on every path link when the lab is built."""
    duration_s: float | None
    size_bytes: int | None
    verify: Verify | None = None
    """How reservoir's extents are verified (its copies hash the whole destination from
    storage at the end either way)."""
    events: tuple[Event, ...] = ()

    @property
    def pacing_rate_bps(self) -> float | None:
        return None if self.pacing_rate_mbit is None else self.pacing_rate_mbit * 1e6

    def value(self, dimension: str) -> object:
        """The scenario's value for a matrix dimension (``size`` is ``size_bytes``)."""
        return self.size_bytes if dimension == "size" else getattr(self, dimension)


def scenario_name(s: Scenario, *, verify: bool = False) -> str:
    """``reservoir-s16-pacing_per-nic-eq_on-paths-bbr-2GiB``: every dimension that
    applies to the tool, in a fixed order; the pacing rate and the loss only when given;
    ``verify_receipt`` (or ``verify_storage``) only with ``verify`` (the matrix names
    the mode: see ``Matrix.verify_named``); the length last (``30s`` for a duration,
    ``2GiB`` for a size)."""
    rate = "" if s.pacing_rate_mbit is None else f"_{s.pacing_rate_mbit:g}m"
    parts = [s.tool, f"s{s.streams}", f"pacing_{s.pacing}{rate}"]
    if s.equalizer is not None:
        parts.append("eq_on" if s.equalizer else "eq_off")
    if verify and s.verify is not None:
        parts.append(f"verify_{s.verify}")
    parts += [s.multilink, s.cc]
    if s.loss is not None:
        parts.append(f"loss_{format_loss(s.loss)}")
    if s.duration_s is not None:
        parts.append(f"{s.duration_s:g}s")
    if s.size_bytes is not None:
        parts.append(format_size(s.size_bytes))
    return "-".join(parts)


def format_loss(p: float) -> str:
    """``1e-4``, ``2.5e-4``, ``0``."""
    if p == 0:
        return "0"
    mantissa, exponent = f"{p:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
