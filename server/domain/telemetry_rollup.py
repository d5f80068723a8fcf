"""Telemetry kept whole for a transfer of any length: full rate for the recent minutes,
coarser further back.

A stream's samples (``stream_samples``, one per agent interval of 0.5 s) older than a
tier's age are merged into one row per bucket of the tier's width: 30 s buckets after
15 minutes, 5-minute buckets after 3 hours (:data:`TIERS`). A merged row stands for the
time its samples covered (``span``, seconds) and ends at the last one's ``time``:

- rates and the shares of the interval (``bits_per_second``, ``busy``,
  ``rwnd_limited``, ``sndbuf_limited``) are means weighted by each sample's span, so
  rate x span (the bytes) is kept;
- ``rtt``, ``rttvar`` and ``snd_cwnd`` are span-weighted means too;
- ``retransmits`` are summed (they count the interval's events);
- ``cap`` and ``path`` are the last sample's.

A 64-stream transfer keeps 15 minutes at 2 Hz (115 200 rows), then 30 s buckets for
the next 2 h 45 min (21 120), then 5-minute buckets (768 an hour): a 10-hour transfer
about 142 000 rows, under the row bound of ``telemetry.MAX_ROWS_PER_TRANSFER``, which
stays the last resort for the longest ones (the oldest rows go first).

Merging is idempotent: a row whose span reaches a tier's width is not read again for
that tier, and a bucket of one row is left alone.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import Session

from reservoir.server.app.tables import StreamSample

__all__ = ["DEFAULT_SPAN", "TIERS", "downsample", "merge"]

TIERS: tuple[tuple[float, float], ...] = ((15 * 60.0, 30.0), (3 * 3600.0, 300.0))
DEFAULT_SPAN = 0.5  # seconds a sample stands for when its agent did not say (2 Hz)
_MEANS = ("bits_per_second", "busy", "rwnd_limited", "sndbuf_limited")
_INT_MEANS = ("snd_cwnd", "rtt", "rttvar")


def downsample(
    session: Session, transfer_id: str, tiers: Sequence[tuple[float, float]] = TIERS
) -> int:
    """Merges the transfer's samples older than each tier's age into its buckets; how
    many rows fewer the transfer has."""
    mine = StreamSample.transfer_id == transfer_id
    newest = session.scalar(select(func.max(StreamSample.time)).where(mine))
    if newest is None:
        return 0
    removed = 0
    for age, width in tiers:
        removed += _tier(session, transfer_id, newest - age, width)
    return removed


def _tier(session: Session, transfer_id: str, cutoff: float, width: float) -> int:
    """Merges the whole buckets of ``width`` seconds that end by ``cutoff``."""
    rows = session.scalars(
        select(StreamSample)
        .where(
            StreamSample.transfer_id == transfer_id,
            StreamSample.time < cutoff,
            or_(StreamSample.span.is_(None), StreamSample.span < width),
        )
        .order_by(StreamSample.time, StreamSample.id)
    ).all()
    buckets: dict[tuple[str, str, int], list[StreamSample]] = defaultdict(list)
    for row in rows:
        bucket = math.floor(row.time / width)
        if (bucket + 1) * width <= cutoff:
            buckets[(row.copy_id, row.stream, bucket)].append(row)
    merged = [members for members in buckets.values() if len(members) > 1]
    gone = [row for members in merged for row in members[:-1]]
    for members in merged:
        merge(members)
    ids = [row.id for row in gone]
    for start in range(0, len(ids), 500):
        session.execute(
            delete(StreamSample)
            .where(StreamSample.id.in_(ids[start : start + 500]))
            .execution_options(synchronize_session=False)
        )
    for row in gone:
        session.expunge(row)
    return len(gone)


def merge(members: Sequence[StreamSample]) -> StreamSample:
    """Makes the last of ``members`` (one stream's, oldest first) stand for all of them."""
    last = members[-1]
    spans = [row.span or DEFAULT_SPAN for row in members]
    total = sum(spans)
    for name in _MEANS:
        setattr(last, name, _mean([getattr(r, name) for r in members], spans))
    for name in _INT_MEANS:
        value = _mean([getattr(r, name) for r in members], spans)
        setattr(last, name, None if value is None else round(value))
    retransmits = [r.retransmits for r in members if r.retransmits is not None]
    last.retransmits = sum(retransmits) if retransmits else None
    last.span = total
    return last


def _mean(values: Sequence[float | int | None], weights: Sequence[float]) -> float | None:
    """The mean of the values given, weighted; None if none is."""
    pairs = [(v, w) for v, w in zip(values, weights, strict=True) if v is not None]
    weight = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / weight if weight > 0 else None
