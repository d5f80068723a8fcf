"""RAID-0 striping (design.md 3.1, level 1): where a logical byte of a striped set lives.

A set of ``members`` volumes with stripe unit ``unit`` holds logical byte ``x`` in
stripe ``s = x // unit``, on member ``s % members``, at ``(s // members) * unit +
x % unit`` inside it. The coordinator uses this to find which server pairs a
transfer's bytes go between (:mod:`reservoir.server.domain.legs`), the agent to cut
its range into extents that never cross a stripe unit
(:mod:`reservoir.agent.transfer`); both take it from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["Place", "locate", "member_ends", "striped_capacity", "unit_end"]


class Place(NamedTuple):
    """Where a logical byte is: the member and the offset inside it."""

    member: int
    offset: int


def locate(x: int, unit: int, members: int) -> Place:
    """The member holding logical byte ``x``, and its offset there."""
    stripe, within = divmod(x, unit)
    return Place(stripe % members, (stripe // members) * unit + within)


def unit_end(x: int, unit: int) -> int:
    """The logical offset where the stripe unit holding ``x`` ends."""
    return (x // unit + 1) * unit


def striped_capacity(member_sizes: Sequence[int], unit: int) -> int:
    """``n`` x the smallest member, in whole stripe units."""
    if not member_sizes:
        return 0
    return len(member_sizes) * (min(member_sizes) // unit) * unit


def member_ends(offset: int, length: int, unit: int, members: int) -> list[int]:
    """How far into each member the logical range ``[offset, offset + length)``
    reaches (0 for a member it does not touch)."""
    first, last = offset // unit, (offset + length - 1) // unit
    ends = [0] * members
    for member in range(members):
        stripe = last - (last - member) % members  # its last stripe in the range
        if stripe >= first:
            reach = min(offset + length, (stripe + 1) * unit) - stripe * unit
            ends[member] = (stripe // members) * unit + reach
    return ends
