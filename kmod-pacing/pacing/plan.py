"""A pacing plan applied to NICs (design 3.3).

The rates come from :class:`reservoir.common.pacing_plan.PacingPlan`, which the
coordinator plans with; this :class:`PacingPlan` adds what only a host does: pacing
its NICs at those rates and undoing it::

    with PacingPlan(nics=[NicSpec("eth1", 10e9, share=0.5)], bottleneck_bps=10e9):
        ...              # apply() every NIC; remove() on exit, also on exceptions

What is applied is kept in the plan and in its JSON, so a plan read back knows what
to remove.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from reservoir.common import pacing_plan
from reservoir.common.pacing_plan import DEFAULT_MARGIN, NicSpec, StreamSpec
from reservoir.pacing import nic
from reservoir.pacing.nic import Applied

__all__ = ["DEFAULT_MARGIN", "Backend", "NicSpec", "PacingPlan", "StreamSpec"]


class Backend(Protocol):
    """What applies a NIC rate: :mod:`reservoir.pacing.nic`, or a fake in tests."""

    def apply(
        self,
        ifname: str,
        rate_bps: int,
        netns: str | None = None,
        *,
        kind: str = ...,
        flows: int = ...,
    ) -> Applied: ...

    def remove(self, applied: Applied) -> bool: ...


class _NicBackend:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def apply(
        self,
        ifname: str,
        rate_bps: int,
        netns: str | None = None,
        *,
        kind: str = "auto",
        flows: int = 1,
    ) -> Applied:
        return nic.apply(ifname, rate_bps, netns, kind=kind, flows=flows, state_dir=self.state_dir)

    def remove(self, applied: Applied) -> bool:
        return nic.remove(applied)


@dataclass
class PacingPlan(pacing_plan.PacingPlan):
    """The plan's rates, and the NICs this host paces at them."""

    applied: list[Applied] = field(default_factory=list, compare=False, repr=False)
    backend: Backend | None = field(default=None, compare=False, repr=False)
    """Who applies NIC rates (default :mod:`reservoir.pacing.nic`); a seam for tests."""

    def apply(self, backend: Backend | None = None, state_dir: Path = nic.STATE_DIR) -> None:
        """Pace every NIC; if one fails, what was already applied is removed first."""
        if self.applied:
            raise RuntimeError("this pacing plan is already applied")
        b = backend or self.backend or _NicBackend(state_dir)
        try:
            for spec in self.nics:
                rate = self.nic_rate(spec)
                flows = max(1, sum(1 for s in self.streams if s.nic == spec.key))
                self.applied.append(
                    b.apply(spec.name, rate, spec.netns, kind=self.kind, flows=flows)
                )
        except BaseException:
            self.remove(b)
            raise

    def remove(self, backend: Backend | None = None) -> None:
        """Undo :meth:`apply`, last NIC first; tries every NIC, then raises the first error."""
        b = backend or self.backend or _NicBackend(nic.STATE_DIR)
        first: BaseException | None = None
        while self.applied:
            applied = self.applied.pop()
            try:
                b.remove(applied)
            except Exception as e:
                first = first or e
        if first is not None:
            raise first

    def __enter__(self) -> Self:
        self.apply()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.remove()

    def to_dict(self) -> dict[str, Any]:
        """The plan's inputs and rates, and what is applied."""
        return {**super().to_dict(), "applied": [a.to_dict() for a in self.applied]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        plan = super().from_dict(d)
        plan.applied = [Applied.from_dict(a) for a in d.get("applied", [])]
        return plan
