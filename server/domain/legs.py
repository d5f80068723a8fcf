"""Level-1 striping (design.md 3.1): which server pair carries which bytes of a transfer.

A volume set is a RAID-0 style stripe (:mod:`reservoir.common.striping`): the byte at
logical offset ``x`` of a set with ``n`` members and stripe unit ``u`` lives on member
``(x // u) % n``. Its capacity is ``n`` times its smallest member, rounded down to
whole stripe units per member.

A transfer copies the source set's logical bytes ``[0, source capacity)`` to the same
offsets of the destination set, so the bytes at ``x`` go from source member
``(x // us) % ns`` to destination member ``(x // ud) % nd``. A *leg* is one such
(source member, destination member) pair with the number of bytes it carries; the
legs are found by walking the stripe boundaries of both sets over one period
(``lcm(us * ns, ud * nd)`` bytes, after which the pattern repeats).

What that gives, the deal the API documents:

- same member count and stripe unit: pair ``i`` of the source with pair ``i`` of
  the destination, ``n`` legs of equal size;
- same stripe unit, ``ns`` divides ``nd``: the destination members are dealt
  round-robin over the source members (destination ``j`` pairs with source
  ``j % ns``); symmetrically when ``nd`` divides ``ns``;
- in general, with ``g = gcd(ns, nd)``, source ``i`` pairs with destination ``j``
  when ``i % g == j % g``: ``lcm(ns, nd)`` legs, every server busy;
- different stripe units: the pairs where the bytes really are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from reservoir.common.striping import locate, striped_capacity, unit_end
from reservoir.server.domain.errors import LayoutError

__all__ = [
    "MAX_SEGMENTS",
    "SUPPORTED_LAYOUTS",
    "Leg",
    "StripeLayout",
    "check_supported",
    "compute_legs",
]

SUPPORTED_LAYOUTS = (
    "supported layouts: the same stripe unit on both sets, and a destination member "
    "count equal to the source's or a multiple of it (each source member then stripes "
    "over its destination members)"
)

MAX_SEGMENTS = 1 << 20


@dataclass(frozen=True, slots=True)
class StripeLayout:
    """A volume set's geometry: member sizes in order and the stripe unit."""

    member_sizes: Sequence[int]
    stripe_unit: int

    @property
    def members(self) -> int:
        return len(self.member_sizes)

    @property
    def capacity(self) -> int:
        return striped_capacity(self.member_sizes, self.stripe_unit)


@dataclass(frozen=True, slots=True)
class Leg:
    source: int  # member index in the source set
    dest: int  # member index in the destination set
    bytes: int


def _pair_bytes(
    source: StripeLayout, dest: StripeLayout, length: int
) -> dict[tuple[int, int], int]:
    """Bytes per (source member, destination member) over ``[0, length)``."""
    us, ud, ns, nd = source.stripe_unit, dest.stripe_unit, source.members, dest.members
    out: dict[tuple[int, int], int] = {}
    x = 0
    while x < length:
        end = min(length, unit_end(x, us), unit_end(x, ud))
        pair = (locate(x, us, ns).member, locate(x, ud, nd).member)
        out[pair] = out.get(pair, 0) + end - x
        x = end
    return out


def compute_legs(source: StripeLayout, dest: StripeLayout) -> list[Leg]:
    """The legs of copying ``source`` onto ``dest``, ordered by (source, dest) member.

    Raises ``ValueError`` if one period of the two stripes has more than
    :data:`MAX_SEGMENTS` pieces (stripe units with no useful common multiple).
    """
    total = source.capacity
    period = math.lcm(source.stripe_unit * source.members, dest.stripe_unit * dest.members)
    walked = min(total, period)
    if walked // source.stripe_unit + walked // dest.stripe_unit > MAX_SEGMENTS:
        raise LayoutError("the stripe units of the two volume sets have no workable common period")
    per_period = _pair_bytes(source, dest, walked)
    if total > walked:
        repeats, rest = divmod(total, period)
        tail = _pair_bytes(source, dest, rest)
        counts = {p: b * repeats + tail.get(p, 0) for p, b in per_period.items()}
    else:
        counts = per_period
    return [Leg(s, d, n) for (s, d), n in sorted(counts.items()) if n > 0]


def check_supported(source: StripeLayout, dest: StripeLayout) -> None:
    """Raises :class:`LayoutError` unless the agents' engine can carry the transfer.

    An agent copy reads one source member and writes one destination, or stripes it
    over several destinations with one stripe unit (destination ``m`` of ``k`` gets
    the member's stripes ``m, m + k, ...``). That expresses exactly the layouts where
    the stripe units are equal and ``nd`` is a multiple of ``ns``: source member ``i``
    then feeds destination members ``i, i + ns, i + 2 ns, ...`` in that order.
    """
    if source.stripe_unit != dest.stripe_unit:
        raise LayoutError(
            f"the stripe units differ ({source.stripe_unit} and {dest.stripe_unit} bytes); "
            + SUPPORTED_LAYOUTS
        )
    if dest.members % source.members:
        raise LayoutError(
            f"{dest.members} destination members for {source.members} source members; "
            + SUPPORTED_LAYOUTS
        )
