"""PathMonitor on fake paths: a failed path is probed with overlapping logins, so it is
found again soon after its link returns although the logins sent while it was down
are lost (as a SYN into a dead link is)."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from reservoir.agent.paths.health import HealthConfig
from reservoir.agent.transfer._paths import RETRY, PathMonitor, Pinger

CONFIG = HealthConfig(ft_hthresh=3, ft_lthresh=1, slow_tout=0.2, hbspan=1.0, hb_miss_limit=3)
RTT = 0.05


class Net:
    """Path "a" goes down and comes back; "b" always works and progresses."""

    def __init__(self) -> None:
        self.up = asyncio.Event()
        self.up.set()
        self.counters = {"a": 0, "b": 0}
        self.events: list[tuple[str, str]] = []
        self.recovered = asyncio.Event()
        self.logins = 0

    # Actions
    def path_counter(self, path: str) -> int:
        if path == "b" or self.up.is_set():
            self.counters[path] += 1
        return self.counters[path]

    def path_busy(self, path: str) -> bool:
        return True

    def path_rtt(self, path: str) -> float | None:
        return None  # not known: the monitor keeps its configured times

    def fail_path(self, path: str, reason: str) -> set[int]:
        return set()

    async def recover_path(self, path: str) -> None:
        self.recovered.set()

    def still_queued(self, extents: set[int]) -> set[int]:
        return set()

    def path_event(self, path: str, state: str, reason: str) -> None:
        self.events.append((path, state))

    # the opener: a login started while "a" is down never completes
    async def open(self, path: str) -> Pinger:
        self.logins += 1
        if path == "a" and not self.up.is_set():
            await asyncio.Event().wait()
        await asyncio.sleep(RTT)
        return Answering()


class Answering:
    async def ping(self, timeout: float = 10.0) -> None:
        await asyncio.sleep(RTT / 2)

    async def close(self) -> None:
        return None


def test_failed_path_is_found_again_soon_after_its_link_returns() -> None:
    async def main() -> tuple[float, Net]:
        net = Net()
        monitor = PathMonitor(["a", "b"], net, net.open, config=CONFIG, sample=0.05)
        monitor.start()
        try:
            await asyncio.sleep(0.3)
            net.up.clear()
            monitor.watch["a"].pinger = None  # its heartbeat session died with the link
            while ("a", "failed") not in net.events:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.3)  # logins started while down hang
            loop = asyncio.get_running_loop()
            restored = loop.time()
            net.up.set()
            await asyncio.wait_for(net.recovered.wait(), 5)
            return loop.time() - restored, net
        finally:
            await monitor.stop()

    took, net = asyncio.run(main())
    assert took < RETRY + 3 * RTT + 0.15  # not the 1 s heartbeat, nor a hung login's timeout
    assert net.logins >= 5  # one every RETRY while the path was down


class LoggingOut(Answering):
    """A heartbeat session whose logout waits until every path's has begun."""

    closing: ClassVar[set[str]] = set()

    def __init__(self, path: str, paths: int) -> None:
        self.path, self.paths = path, paths

    async def close(self) -> None:
        LoggingOut.closing.add(self.path)
        while len(LoggingOut.closing) < self.paths:
            await asyncio.sleep(0.01)


def test_stopping_logs_every_paths_heartbeat_session_out_at_once() -> None:
    """A logout is a round trip: the copy's end waits for one, not one per path (each
    waits here until all have begun, so logging out one after the other would take the
    2 s a logout is given, each)."""

    LoggingOut.closing.clear()

    async def main() -> float:
        net = Net()
        paths = ["a", "b", "c"]

        async def open_path(path: str) -> Pinger:
            return LoggingOut(path, len(paths))

        monitor = PathMonitor(paths, net, open_path, config=CONFIG, sample=0.05)
        monitor.start()
        while any(w.pinger is None for w in monitor.watch.values()):
            await asyncio.sleep(0.01)
        loop = asyncio.get_running_loop()
        began = loop.time()
        await monitor.stop()
        return loop.time() - began

    took = asyncio.run(main())
    assert LoggingOut.closing == {"a", "b", "c"}
    assert took < 1.0
