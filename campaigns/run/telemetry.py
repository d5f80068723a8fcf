"""From what the tools report to the records of a run (results.py).

- The coordinator's per-stream samples (``GET /transfers/{id}/streams``: Unix ``time``,
  ``bits_per_second`` over the interval ending then, ``snd_cwnd``, ``rtt``, ``cap``)
  become :class:`Stream` records, with times relative to the run's start.
- iperf3's ``-J`` document (``intervals[].streams[]``) does the same for iperf3.
- :func:`intervals` sums the streams into one aggregate per second.
- :func:`failover` reads the per-link wire counters around a link-down/up pair.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from reservoir.campaigns import results
from reservoir.campaigns._scenario import Scenario
from reservoir.campaigns.results import Event, Failover, Interval, Sample, Stream
from reservoir.lab.lfn_sampling import Bin, back_after, lost_seconds, mean_rate

__all__ = [
    "PRE_CUT_S",
    "failover",
    "intervals",
    "iperf3_streams",
    "scenario_record",
    "stream_records",
]

Json = dict[str, Any]
PRE_CUT_S = 3.0  # the rate before a cut is the mean over this long
MIN_BIN = 0.2  # a last bin shorter than this (of the width) is left out: too noisy
BACK_FRACTION = 0.1  # a restored link is back once it carries 10% of its rate before


def scenario_record(s: Scenario) -> results.Scenario:
    """The settings of a campaign scenario as the results record them."""
    return results.Scenario(
        name=s.name,
        tool=s.tool,
        streams=s.streams,
        pacing=s.pacing,
        pacing_rate_bps=s.pacing_rate_bps,
        equalizer=s.equalizer,
        multilink=s.multilink,
        cc=s.cc,
        size_bytes=s.size_bytes,
        duration_s=s.duration_s,
        loss=s.loss,
        verify=s.verify,
    )


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def stream_records(
    samples: Iterable[Json], started: float, path_of: Callable[[str | None], str | None], mss: int
) -> list[Stream]:
    """The coordinator's samples of one transfer, one :class:`Stream` per (leg, stream),
    ordered by leg and stream number; samples before ``started`` are dropped."""
    by: dict[tuple[int, str], Stream] = {}
    for s in sorted(samples, key=lambda s: float(s["time"])):
        t = float(s["time"]) - started
        if t <= 0:
            continue
        key = (int(s.get("leg") or 0), str(s["stream"]))
        stream = by.get(key)
        if stream is None:
            stream = by[key] = Stream(f"{key[0]}.{key[1]}", path_of(s.get("path")), mss_bytes=mss)
        if stream.samples and t <= stream.samples[-1].t:
            continue  # the same interval reported twice
        stream.samples.append(
            Sample(
                t,
                float(s.get("bits_per_second") or 0.0),
                _opt_int(s.get("snd_cwnd")),
                _opt_int(s.get("rtt")),
                _opt_int(s.get("retransmits")),
                _opt_int(s.get("cap")) or None,
                _opt_float(s.get("busy")),
                _opt_float(s.get("rwnd_limited")),
                _opt_float(s.get("sndbuf_limited")),
            )
        )
    return [by[k] for k in sorted(by, key=lambda k: (k[0], int(k[1]) if k[1].isdigit() else 0))]


def iperf3_streams(doc: Json, offset: float, path: str | None, prefix: str) -> list[Stream]:
    """One :class:`Stream` per socket of one iperf3 client's ``-J`` document; ``offset``
    is when the client started, seconds after the run's start."""
    by: dict[int, Stream] = {}
    mss = _iperf3_mss(doc)
    for interval in doc.get("intervals", []):
        for s in interval.get("streams", []):
            sock = int(s["socket"])
            stream = by.setdefault(sock, Stream(f"{prefix}{len(by)}", path, mss_bytes=mss))
            stream.samples.append(
                Sample(
                    offset + float(s["end"]),
                    float(s["bits_per_second"]),
                    _opt_int(s.get("snd_cwnd")),
                    _opt_int(s.get("rtt")),
                    _opt_int(s.get("retransmits")),
                )
            )
    return list(by.values())


def _iperf3_mss(doc: Json) -> int | None:
    mss = doc.get("start", {}).get("tcp_mss_default")
    return int(mss) if mss else None


def intervals(streams: Sequence[Stream], width: float = 1.0) -> list[Interval]:
    """The streams' sum over consecutive ``width``-second bins from 0 (each sample
    covering ``(previous t, t]``); the last bin ends at the last sample, and is left
    out when shorter than MIN_BIN of the width."""
    end = max((s.samples[-1].t for s in streams if s.samples), default=0.0)
    if end <= 0:
        return []
    n = math.ceil(end / width - 1e-9)
    bits = [0.0] * n
    for stream in streams:
        prev = 0.0
        for s in stream.samples:
            _spread(bits, prev, s.t, s.bps, width)
            prev = s.t
    out = []
    for i, b in enumerate(bits):
        lo, hi = i * width, min((i + 1) * width, end)
        if hi - lo >= MIN_BIN * width or i == 0:
            out.append(Interval(hi, b / (hi - lo)))
    return out


def _spread(bits: list[float], t0: float, t1: float, bps: float, width: float) -> None:
    """Add ``bps`` over ``(t0, t1]`` into the bins it overlaps."""
    i = int(t0 // width)
    while i < len(bits) and i * width < t1:
        overlap = min(t1, (i + 1) * width) - max(t0, i * width)
        if overlap > 0:
            bits[i] += bps * overlap
        i += 1


def failover(bins: list[Bin], events: Sequence[Event], started: float) -> Failover | None:
    """The figures of the first link-down followed by a link-up of the same link:
    seconds of aggregate throughput lost while it was down, against what the other
    links carried in the PRE_CUT_S before; seconds from link-up until the link carries
    BACK_FRACTION of its own rate before the cut (None: never). None without such a
    pair, or when no other link carried data. ``bins`` are per-link wire rates with Unix
    times; event times are relative to ``started``."""
    down = next((e for e in events if e.kind == "link-down"), None)
    if down is None:
        return None
    up = next((e for e in events if e.kind == "link-up" and e.detail == down.detail), None)
    if up is None or not bins:
        return None
    link = down.detail
    t_down, t_up = started + down.t, started + up.t
    others = [k for k in bins[0].mbit if k != link]
    reference = sum(mean_rate(bins, k, t_down - PRE_CUT_S, t_down) for k in others)
    if reference <= 0:
        return None  # no other path carried anything: nothing to fail over to
    lost = lost_seconds(bins, t_down, t_up, reference)
    before = mean_rate(bins, link, t_down - PRE_CUT_S, t_down)
    back = back_after(bins, link, t_up, BACK_FRACTION * before)
    return Failover(lost, back)
