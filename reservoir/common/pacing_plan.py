"""The rates of a pacing plan (design 3.3): every NIC and every stream gets a rate below
its share. The coordinator plans with it and sends the rates; the pacing component
(:mod:`reservoir.pacing.plan`) applies a plan to NICs. Both import it from here, so the
coordinator loads no tc, netlink or BPF code.

The point of pacing is that no sender ever offers more than its share of the
bottleneck, so router queues on the long path stay short and no stream's
bursts starve the others. The plan turns capacities and shares into rates::

    plan = PacingPlan(
        nics=[NicSpec("eth1", capacity_bps=10e9, share=0.5),
              NicSpec("eth2", capacity_bps=10e9, share=0.5)],
        streams=[StreamSpec("s0", "eth1"), StreamSpec("s1", "eth1", weight=2),
                 StreamSpec("s2", "eth2")],
        bottleneck_bps=10e9, margin=0.97)
    plan.nic_rates()     # {"eth1": 4_850_000_000, "eth2": 4_850_000_000}
    plan.stream_rates()  # {"s0": 1_616_666_666, "s1": 3_233_333_333, "s2": 4_850_000_000}

Rules: a NIC with an explicit ``rate_bps`` gets exactly that (it must fit its
capacity). A NIC with a ``share`` aims at ``share x bottleneck``; NICs with
neither split what is left of the bottleneck in proportion to their capacity.
The target is capped at the NIC's capacity and multiplied by ``margin``
(default 0.97: the measured accuracy of TBF/HTB here is 0.95-0.97 of line rate,
and staying a few percent under the share keeps the bottleneck queue empty).
``bottleneck_bps`` defaults to the sum of the NICs' capacities. A stream gets
its NIC's rate times its weight over the weights of the NIC's streams (the
per-socket cap, SO_MAX_PACING_RATE, is applied elsewhere).

NICs are named ``name`` or ``netns/name`` (:attr:`NicSpec.key`); the plan and
its rates serialize to JSON for the coordinator's database.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Self

__all__ = ["DEFAULT_MARGIN", "NicSpec", "PacingPlan", "StreamSpec"]

DEFAULT_MARGIN = 0.97
_EPS = 1e-9


@dataclass(frozen=True)
class NicSpec:
    """A NIC: its line capacity and either a share of the bottleneck or a rate."""

    name: str
    capacity_bps: float
    share: float | None = None
    rate_bps: float | None = None
    netns: str | None = None

    @property
    def key(self) -> str:
        """How streams name this NIC: ``name``, or ``netns/name`` in a namespace."""
        return self.name if self.netns is None else f"{self.netns}/{self.name}"

    def validate(self) -> None:
        _positive(f"capacity of NIC {self.key}", self.capacity_bps)
        if self.share is not None and self.rate_bps is not None:
            raise ValueError(f"NIC {self.key}: give a share or a rate, not both")
        if self.share is not None and not (0 < self.share <= 1):
            raise ValueError(f"NIC {self.key}: share must be in (0, 1], not {self.share!r}")
        if self.rate_bps is not None:
            _positive(f"rate of NIC {self.key}", self.rate_bps)
            if self.rate_bps > self.capacity_bps:
                raise ValueError(f"NIC {self.key}: rate {self.rate_bps:g} above its capacity")


@dataclass(frozen=True)
class StreamSpec:
    """A stream (TCP connection) on a NIC, with a weight for its part of the NIC's rate."""

    id: str
    nic: str
    weight: float = 1.0


def _positive(what: str, value: float) -> None:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a finite number > 0, not {value!r}")


@dataclass
class PacingPlan:
    """NICs, streams and how close to the share to go; rates are derived, never stored."""

    nics: Sequence[NicSpec]
    streams: Sequence[StreamSpec] = ()
    bottleneck_bps: float | None = None
    margin: float = DEFAULT_MARGIN
    kind: str = "auto"

    def __post_init__(self) -> None:
        self.nics = tuple(self.nics)
        self.streams = tuple(self.streams)
        self.validate()

    # -------------------------------------------------------------- rates

    def validate(self) -> None:
        """ValueError naming the first inconsistency; computing rates then cannot fail."""
        if not self.nics:
            raise ValueError("a pacing plan needs at least one NIC")
        if not (0 < self.margin <= 1):
            raise ValueError(f"margin must be in (0, 1], not {self.margin!r}")
        if self.bottleneck_bps is not None:
            _positive("bottleneck", self.bottleneck_bps)
        for spec in self.nics:
            spec.validate()
        _unique("NIC", [n.key for n in self.nics])
        _unique("stream", [s.id for s in self.streams])
        keys = {n.key for n in self.nics}
        for s in self.streams:
            if s.nic not in keys:
                raise ValueError(f"stream {s.id}: no NIC {s.nic!r} in the plan")
            _positive(f"weight of stream {s.id}", s.weight)
        if self._unassigned_bps() < -_EPS * self._bottleneck():
            raise ValueError("NIC shares and rates add up to more than the bottleneck")

    def _bottleneck(self) -> float:
        return self.bottleneck_bps or sum(n.capacity_bps for n in self.nics)

    def _unassigned_bps(self) -> float:
        """What shares and explicit rates leave of the bottleneck."""
        taken = sum((n.share or 0) * self._bottleneck() + (n.rate_bps or 0) for n in self.nics)
        return self._bottleneck() - taken

    def _target(self, spec: NicSpec) -> float:
        if spec.share is not None:
            return spec.share * self._bottleneck()
        free = [n for n in self.nics if n.share is None and n.rate_bps is None]
        left = max(self._unassigned_bps(), 0.0)
        return left * spec.capacity_bps / sum(n.capacity_bps for n in free)

    def nic_rate(self, spec: NicSpec) -> int:
        if spec.rate_bps is not None:
            return round(spec.rate_bps)
        return round(min(self._target(spec), spec.capacity_bps) * self.margin)

    def nic_rates(self) -> dict[str, int]:
        """Rate (bit/s) of every NIC, by :attr:`NicSpec.key`."""
        return {n.key: self.nic_rate(n) for n in self.nics}

    def stream_rates(self) -> dict[str, int]:
        """Rate (bit/s) of every stream: its NIC's rate split by weight."""
        rates = self.nic_rates()
        total: dict[str, float] = {}
        for s in self.streams:
            total[s.nic] = total.get(s.nic, 0.0) + s.weight
        return {s.id: round(rates[s.nic] * s.weight / total[s.nic]) for s in self.streams}

    # -------------------------------------------------------------- JSON

    def to_dict(self) -> dict[str, Any]:
        """Inputs and the derived rates (for readers that do not recompute)."""
        return {
            "nics": [asdict(n) for n in self.nics],
            "streams": [asdict(s) for s in self.streams],
            "bottleneck_bps": self.bottleneck_bps,
            "margin": self.margin,
            "kind": self.kind,
            "nic_rates": self.nic_rates(),
            "stream_rates": self.stream_rates(),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        """Rebuild from :meth:`to_dict`; the rates are recomputed, not trusted."""
        bottleneck = d.get("bottleneck_bps")
        return cls(
            nics=[_nic_from(n) for n in d["nics"]],
            streams=[
                StreamSpec(str(s["id"]), str(s["nic"]), float(s["weight"])) for s in d["streams"]
            ],
            bottleneck_bps=None if bottleneck is None else float(bottleneck),
            margin=float(d.get("margin", DEFAULT_MARGIN)),
            kind=str(d.get("kind", "auto")),
        )

    @classmethod
    def from_json(cls, text: str) -> Self:
        data: dict[str, Any] = json.loads(text)
        return cls.from_dict(data)


def _nic_from(d: dict[str, Any]) -> NicSpec:
    def opt(key: str) -> float | None:
        return None if d.get(key) is None else float(d[key])

    netns = d.get("netns")
    return NicSpec(
        name=str(d["name"]),
        capacity_bps=float(d["capacity_bps"]),
        share=opt("share"),
        rate_bps=opt("rate_bps"),
        netns=None if netns is None else str(netns),
    )


def _unique(what: str, keys: list[str]) -> None:
    seen: set[str] = set()
    for k in keys:
        if k in seen:
            raise ValueError(f"{what} {k!r} appears twice in the plan")
        seen.add(k)
