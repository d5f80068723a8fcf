"""Per-stream telemetry records and their line-delimited JSON file.

A record is one stream over one sampling interval, a flat JSON object whose names follow
iperf3's ``--json`` interval streams (esnet/iperf ``src/iperf_api.c``: ``bytes``,
``bits_per_second``, ``retransmits``, ``snd_cwnd``, ``snd_wnd``, ``rtt``, ``rttvar``,
``pmtu``), plus TCP_INFO counters iperf3 does not print (``delivery_rate``,
``pacing_rate`` in bytes/s, cumulative ``total_retrans`` and ``bytes_acked``) and our
``time`` (Unix seconds at the end of the interval), ``stream`` and ``path`` ids.

What held a stream back over the interval, from the kernel's chronographs (Linux
4.10): ``busy_us`` microseconds with data in flight or queued (which include the two
that follow), ``rwnd_limited_us`` stalled on the peer's receive window,
``sndbuf_limited_us`` stalled on the send buffer; the rest of the interval the stream
had nothing to send (application-limited). ``notsent_bytes`` (written, not yet sent)
and ``in_flight_bytes`` (sent, not yet acknowledged nor lost) are the state at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import IO

from .tcp_info import TcpInfo

__all__ = ["JsonLinesWriter", "Record", "make_record"]

Record = dict[str, int | float | str | None]


def _delta(cur: int | None, prev: int | None) -> int | None:
    """Counter increase; ``0`` if it went backwards (a reset), ``None`` if unknown."""
    if cur is None or prev is None:
        return None
    return max(cur - prev, 0)


def make_record(
    *, stream: str, path: str, prev: TcpInfo, cur: TcpInfo, seconds: float, time: float
) -> Record:
    """Build the record of one stream for the interval between ``prev`` and ``cur``.

    ``seconds`` is the interval length (monotonic clock); ``bytes`` is the growth of
    ``tcpi_bytes_acked`` and ``bits_per_second`` is ``8 * bytes / seconds``.
    """
    acked = _delta(cur.bytes_acked, prev.bytes_acked)
    bps = None if acked is None or seconds <= 0 else acked * 8 / seconds
    return {
        "time": time,
        "stream": stream,
        "path": path,
        "seconds": seconds,
        "bytes": acked,
        "bits_per_second": bps,
        "retransmits": _delta(cur.total_retrans, prev.total_retrans),
        "snd_cwnd": cur.snd_cwnd_bytes,
        "snd_wnd": cur.snd_wnd,
        "rtt": cur.rtt,
        "rttvar": cur.rttvar,
        "pmtu": cur.pmtu,
        "delivery_rate": cur.delivery_rate,
        "pacing_rate": cur.pacing_rate,
        "total_retrans": cur.total_retrans,
        "bytes_acked": cur.bytes_acked,
        "busy_us": _delta(cur.busy_time, prev.busy_time),
        "rwnd_limited_us": _delta(cur.rwnd_limited, prev.rwnd_limited),
        "sndbuf_limited_us": _delta(cur.sndbuf_limited, prev.sndbuf_limited),
        "notsent_bytes": cur.notsent_bytes,
        "in_flight_bytes": cur.in_flight_bytes,
    }


class JsonLinesWriter:
    """Appends records to a file, one compact JSON object per line.

    :meth:`write` flushes after each batch (one batch per sampling interval), so a reader
    tailing the file never sees half an interval for long. Use as a context manager or call
    :meth:`close`; closing twice is harmless.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: IO[str] | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._file is None

    def write(self, records: Iterable[Record]) -> int:
        """Append ``records`` (one line each), flush, and return how many were written."""
        if self._file is None:
            raise ValueError("JsonLinesWriter is closed")
        count = 0
        for record in records:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            count += 1
        self._file.flush()
        return count

    def close(self) -> None:
        """Flush and close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> JsonLinesWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
