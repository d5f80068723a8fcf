"""Periodic TCP_INFO sampling of registered streams (>= 2 Hz by default).

Every registered stream has an id, the id of the path it runs on, and a *source*: a
callable returning either the stream's socket or raw TCP_INFO bytes (the seam tests use to
feed fake kernel data). Each :meth:`StreamSampler.sample_once` reads every source and turns
the difference with the previous snapshot into one record (see :mod:`.records`). The first
snapshot of a stream is only a baseline and yields no record: taken by the first sample
after it was registered, or at once when registered with ``baseline=True`` (so what it
sends before that sample is counted too). A stream whose source raises
:class:`OSError` (closed socket) or returns no bytes has disappeared: it is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from .mptcp_info import combine, is_mptcp, subflow_infos
from .records import Record, make_record
from .tcp_info import TcpInfo, parse_tcp_info, sample

__all__ = ["DEFAULT_INTERVAL", "Sink", "Source", "StreamSampler", "snapshot"]

log = logging.getLogger(__name__)

#: Sampling interval in seconds: 2 Hz, the rate the equalizer needs (design section 3.2).
DEFAULT_INTERVAL = 0.5

Source = Callable[[], bytes | socket.socket]
Sink = Callable[[list[Record]], object]


@dataclass
class _Stream:
    path: str
    source: Source
    last: TcpInfo | None = None
    last_at: float = 0.0


def snapshot(sock: socket.socket) -> TcpInfo:
    """TCP_INFO of a TCP socket; of an MPTCP one, all its subflows' together (its own
    TCP_INFO is its first subflow's), or the first subflow's where the kernel cannot
    list them (a connection that fell back to plain TCP)."""
    if is_mptcp(sock):
        with contextlib.suppress(OSError):
            infos = subflow_infos(sock)
            if infos:
                return combine(infos)
    return sample(sock)


def _read(source: Source) -> TcpInfo | None:
    """Snapshot of one source, or None when the stream is gone."""
    try:
        got = source()
        info = snapshot(got) if isinstance(got, socket.socket) else parse_tcp_info(got)
    except OSError as exc:
        log.debug("stream source failed: %s", exc)
        return None
    return info if info.length > 0 else None


class StreamSampler:
    """Samples registered streams every ``interval`` seconds and hands records to a sink.

    ``clock`` (monotonic, for interval lengths) and ``wallclock`` (for the ``time`` field)
    are injectable so tests control time.
    """

    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL,
        *,
        clock: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], float] = time.time,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.interval = interval
        self._clock = clock
        self._wallclock = wallclock
        self._streams: dict[str, _Stream] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def streams(self) -> dict[str, str]:
        """Registered stream ids and their path ids."""
        return {sid: s.path for sid, s in self._streams.items()}

    def register(self, stream: str, path: str, source: Source, *, baseline: bool = False) -> None:
        """Start sampling ``stream`` (replacing any stream of the same id); with
        ``baseline``, its first snapshot is taken now (none if the source fails: then
        by the next sample)."""
        entry = self._streams[stream] = _Stream(path, source)
        if baseline:
            entry.last, entry.last_at = _read(source), self._clock()

    def unregister(self, stream: str) -> None:
        """Stop sampling ``stream``; unknown ids are ignored."""
        self._streams.pop(stream, None)

    def sample_once(self) -> list[Record]:
        """Read every stream once and return the records of the interval just ended."""
        now, wall = self._clock(), self._wallclock()
        records: list[Record] = []
        for sid, stream in list(self._streams.items()):
            info = _read(stream.source)
            if info is None:
                log.info("stream %s on path %s disappeared; dropped", sid, stream.path)
                del self._streams[sid]
                continue
            prev, seconds = stream.last, now - stream.last_at
            if prev is not None:
                records.append(
                    make_record(
                        stream=sid,
                        path=stream.path,
                        prev=prev,
                        cur=info,
                        seconds=seconds,
                        time=wall,
                    )
                )
            stream.last, stream.last_at = info, now
        return records

    async def run(self, sink: Sink) -> None:
        """Sample forever at a steady cadence, passing each interval's records to ``sink``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            records = self.sample_once()
            if records:
                sink(records)
            deadline = max(deadline + self.interval, loop.time())  # no catch-up bursts
            await asyncio.sleep(deadline - loop.time())

    def start(self, sink: Sink) -> asyncio.Task[None]:
        """Run :meth:`run` as a task of the running loop (one at a time)."""
        if self._task is not None and not self._task.done():
            raise RuntimeError("sampler already running")
        self._task = asyncio.get_running_loop().create_task(self.run(sink))
        return self._task

    async def stop(self) -> None:
        """Cancel the task started by :meth:`start` and wait for it."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
