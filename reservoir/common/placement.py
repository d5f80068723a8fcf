"""Which link each stream of a copy runs on: in proportion to the links' capacities.

With stream i on link i mod k, the streams of a thin link get a fraction of what the
streams of a fat one get (SC2003's 122 and 585 Mbit/s paths: 15 against 73 Mbit/s a
stream with 24 streams). The equalizer then fights unequal paths rather than unequal
streams, and at the end of a copy the thin link's streams hold the last extents. So the
streams are dealt in proportion to capacity, at least one on every link (when there
are as many streams as links), interleaved by smooth weighted round robin so that any
prefix of the streams is spread too. Equal capacities give i mod k, as before.

The copy's ``paths`` then lists one path per stream (the agent runs stream i on
``paths[i % len(paths)]``), and the pacing plan assigns the same links to the same
streams (``pacing.plan_for``).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MAX_PATHS", "placement"]

MAX_PATHS = 256  # entries of a copy's paths: one per stream (CopyBase.streams <= 256)


def _counts(capacities: Sequence[float], streams: int) -> list[int]:
    """Streams per link: proportional (largest remainder), at least one each."""
    total = sum(capacities)
    quotas = [streams * c / total for c in capacities]
    counts = [max(1, int(q)) for q in quotas]
    while sum(counts) < streams:
        i = max(range(len(counts)), key=lambda i: (quotas[i] - counts[i], -i))
        counts[i] += 1
    while sum(counts) > streams:
        i = max(
            (i for i in range(len(counts)) if counts[i] > 1), key=lambda i: counts[i] - quotas[i]
        )
        counts[i] -= 1
    return counts


def placement(capacities: Sequence[float], streams: int) -> list[int]:
    """The link index of every stream (``len == streams``)."""
    k = len(capacities)
    if not k:
        return []
    if streams <= k or len(set(capacities)) == 1 or min(capacities) <= 0:
        return [i % k for i in range(streams)]
    counts = _counts(capacities, streams)
    current = [0] * k
    out = []
    for _ in range(streams):
        for i in range(k):
            current[i] += counts[i]
        j = max(range(k), key=lambda i: (current[i], -i))
        current[j] -= streams
        out.append(j)
    return out
