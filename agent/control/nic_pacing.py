"""Per-NIC pacing of the copies that run (design 3.3), applied by the agent.

A copy's caps may name NIC pacing rates (``nic_pacing_rates``, bytes per second, from
the coordinator's pacing plan). While the copy runs, each of those NICs gets a root
qdisc pacing it (:mod:`reservoir.pacing.nic`: TBF with a small bucket here, ``fq
maxrate`` where the kernel has sch_fq); when it ends, pauses or fails, the qdisc goes.
Several running copies that pace one NIC add up: each brings its own share, and its
streams (fq's maxrate paces each flow, so it is set to the NIC's rate over the
streams that share it).

What is installed is recorded in ``<agent state>/pacing/`` (one file per device, with
the agent's PID), so an agent that died leaves nothing behind: the next start removes
the qdiscs of dead owners (:meth:`NicPacer.start`). A NIC that cannot be paced (not
there, a root qdisc someone else installed, no permission) is reported in
:attr:`NicPacer.errors` and the copy goes on unpaced: pacing smooths a transfer, it
never stops one.

The kernel is asked from one worker thread, in order: pyroute2's netlink calls run an
event loop of their own and cannot run inside the agent's, and a qdisc change must not
hold up the copies. :meth:`NicPacer.flush` waits until what was asked so far is done.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from reservoir.pacing import nic
from reservoir.pacing.nic import Applied

__all__ = ["NicBackend", "NicPacer"]

log = logging.getLogger("reservoir.agent.pacing")


class NicBackend(Protocol):
    """What installs and removes a NIC's pacing: :mod:`reservoir.pacing.nic`, or a fake."""

    def apply(self, ifname: str, rate_bps: int, *, flows: int, state_dir: Path) -> Applied: ...

    def remove(self, applied: Applied) -> bool: ...

    def cleanup_stale(self, state_dir: Path) -> list[Applied]: ...


class _Kernel:
    def apply(self, ifname: str, rate_bps: int, *, flows: int, state_dir: Path) -> Applied:
        return nic.apply(ifname, rate_bps, flows=flows, state_dir=state_dir)

    def remove(self, applied: Applied) -> bool:
        return nic.remove(applied)

    def cleanup_stale(self, state_dir: Path) -> list[Applied]:
        return nic.cleanup_stale(state_dir)


class NicPacer:
    """The agent's NIC pacing: the sum of the running copies' rates per NIC."""

    def __init__(self, state_dir: Path, backend: NicBackend | None = None) -> None:
        self.state_dir = state_dir
        self.backend: NicBackend = backend or _Kernel()
        self.wanted: dict[str, dict[str, int]] = {}  # copy -> NIC -> bytes/s
        self.flows: dict[str, dict[str, int]] = {}  # copy -> NIC -> its streams there
        self.applied: dict[str, Applied] = {}  # NIC -> its qdisc
        self.errors: dict[str, str] = {}  # NIC -> why it is not paced as wanted
        self._lock = threading.Lock()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="reservoir-nic-pacing")

    def start(self) -> None:
        """Removes what an agent that died left on its NICs."""
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._worker.submit(self._cleanup).result()

    def set(
        self, copy_id: str, rates: Mapping[str, int], flows: Mapping[str, int] | None = None
    ) -> Future[None]:
        """``copy_id`` paces these NICs (bytes/s) from now on; an empty map: none.
        ``flows``: how many of its streams leave through each NIC (1 where not said).
        The future is done once the qdiscs are as wanted (or refused, see ``errors``)."""
        with self._lock:
            if rates:
                self.wanted[copy_id] = dict(rates)
                self.flows[copy_id] = {n: max(1, (flows or {}).get(n, 1)) for n in rates}
            else:
                self.wanted.pop(copy_id, None)
                self.flows.pop(copy_id, None)
        return self._worker.submit(self._sync)

    def clear(self, copy_id: str) -> None:
        """``copy_id`` stopped: its share of every NIC goes."""
        with self._lock:
            self.flows.pop(copy_id, None)
            if self.wanted.pop(copy_id, None) is None:
                return
        self._worker.submit(self._sync)

    def flush(self) -> None:
        """Waits until every change asked so far is made."""
        self._worker.submit(lambda: None).result()

    def close(self) -> None:
        """Removes every qdisc this agent installed; waits for it."""
        with self._lock:
            self.wanted.clear()
            self.flows.clear()
        self._worker.submit(self._sync)
        self._worker.shutdown(wait=True)

    def totals(self) -> dict[str, int]:
        """Bytes/s wanted per NIC, over every running copy."""
        with self._lock:
            return _summed(self.wanted.values())

    def flow_totals(self) -> dict[str, int]:
        """Streams per NIC, over every running copy that paces it."""
        with self._lock:
            return _summed(self.flows.values())

    def _cleanup(self) -> None:
        try:
            gone = self.backend.cleanup_stale(self.state_dir)
        except Exception as exc:  # never stops the agent
            log.warning("pacing left by a stopped agent not cleaned up: %s", exc)
            return
        for applied in gone:
            log.info("removed the pacing a stopped agent left on %s", applied.ifname)

    def describe(self, rates: Mapping[str, int]) -> str:
        """How the NICs of one copy are paced, for its caps' ``reason``."""
        parts = []
        for name in sorted(rates):
            if name in self.errors:
                parts.append(f"{name} not paced: {self.errors[name]}")
            elif (a := self.applied.get(name)) is not None:
                each = f" ({a.flows} flows)" if a.kind == "fq" else ""
                parts.append(f"{name} at {a.rate_bps / 1e6:.1f} Mbit/s with {a.kind}{each}")
        return "; ".join(parts)

    def _sync(self) -> None:
        totals, flows = self.totals(), self.flow_totals()
        for name in sorted(set(self.applied) | set(totals) | set(self.errors)):
            want = totals.get(name)
            have = self.applied.get(name)
            if have is not None and (
                want is None or (have.rate_bps, have.flows) != (want * 8, _flows(have, flows, name))
            ):
                self._remove(name, have)
            if want is not None and name not in self.applied:
                self._apply(name, want, flows.get(name, 1))
            elif want is None:
                self.errors.pop(name, None)

    def _apply(self, name: str, rate: int, flows: int) -> None:
        try:
            self.applied[name] = self.backend.apply(
                name, rate * 8, flows=flows, state_dir=self.state_dir
            )
        except Exception as exc:  # pacing never stops a copy
            self.errors[name] = str(exc)
            log.warning("NIC %s not paced at %d bytes/s: %s", name, rate, exc)
        else:
            self.errors.pop(name, None)

    def _remove(self, name: str, applied: Applied) -> None:
        try:
            self.backend.remove(applied)
        except Exception as exc:
            log.warning("pacing of NIC %s not removed: %s", name, exc)
        del self.applied[name]


def _summed(maps: Iterable[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for one in maps:
        for name, value in one.items():
            out[name] = out.get(name, 0) + value
    return out


def _flows(have: Applied, flows: Mapping[str, int], name: str) -> int:
    """The flows ``have`` should be paced for now: only fq counts them."""
    return flows.get(name, 1) if have.kind == "fq" else have.flows
