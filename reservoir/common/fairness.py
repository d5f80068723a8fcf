"""Jain's fairness index: the one measure of "equal streams" that the coordinator's
equalizer steers by and the campaigns and benchmarks report."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["jain"]


def jain(rates: Iterable[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one stream has everything."""
    values = list(rates)
    square_sum = sum(r * r for r in values)
    if not values or square_sum == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * square_sum)
