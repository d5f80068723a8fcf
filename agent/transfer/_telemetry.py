"""``--telemetry FILE``: one JSON object a line, told apart by their ``type``.

- ``"stream"``: a :class:`~reservoir.agent.telemetry.StreamSampler` record (iperf3
  names: ``bits_per_second``, ``snd_cwnd``, ``rtt``...) of one stream's session every
  ``interval`` (2 Hz), with its ``stream`` and ``path`` ids;
- ``"path"``: a path state change ``{"time", "path", "state", "reason"}``;
- ``"progress"``: ``{"time", "extents_done", "extents_total", "bytes_done"}`` every
  engine tick and once at the end.

An MPTCP socket does not answer TCP_INFO on every kernel; such streams are dropped by
the sampler and only the path and progress records remain.
"""

from __future__ import annotations

import time
from pathlib import Path

from reservoir.agent.initiator import Session
from reservoir.agent.telemetry import DEFAULT_INTERVAL, JsonLinesWriter, Record, StreamSampler


class Telemetry:
    def __init__(self, path: Path, interval: float = DEFAULT_INTERVAL) -> None:
        self.writer = JsonLinesWriter(path)
        self.sampler = StreamSampler(interval)
        self._sampled_last = False

    def start(self) -> None:
        self.sampler.start(self._streams)

    def _streams(self, records: list[Record]) -> None:
        if not self.writer.closed:
            self.writer.write([{"type": "stream", **r} for r in records])

    def stream(self, stream: int, path: str, session: Session) -> None:
        # the socket, not its TCP_INFO bytes: an MPTCP socket's are its first subflow's,
        # and the sampler reads all its subflows; no socket (reconnecting): stream gone.
        # Its baseline now, before it sends: its records then count every byte it sends.
        self.sampler.register(str(stream), path, lambda: session.socket() or b"", baseline=True)

    def stream_gone(self, stream: int) -> None:
        self.sampler.unregister(str(stream))

    def path_state(self, path: str, state: str, reason: str) -> None:
        self._write(
            {"type": "path", "time": time.time(), "path": path, "state": state, "reason": reason}
        )

    def progress(self, extents_done: int, extents_total: int, bytes_done: int) -> None:
        self._write(
            {
                "type": "progress",
                "time": time.time(),
                "extents_done": extents_done,
                "extents_total": extents_total,
                "bytes_done": bytes_done,
            }
        )

    def _write(self, record: Record) -> None:
        if not self.writer.closed:
            self.writer.write([record])

    async def last_sample(self) -> None:
        """Stops the sampler after one last sample of every stream (call it while the
        sessions are still open: a short copy may end before the first interval)."""
        if not self._sampled_last:
            self._sampled_last = True
            await self.sampler.stop()
            self._streams(self.sampler.sample_once())

    async def close(self) -> None:
        await self.last_sample()
        self.writer.close()
