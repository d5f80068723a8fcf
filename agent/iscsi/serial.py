"""32-bit serial number arithmetic for CmdSN, StatSN and DataSN (RFC 1982,
RFC 7143 §4.2.2.1): comparisons that stay right across the wrap at 2**32."""

from __future__ import annotations

MASK = 0xFFFFFFFF
HALF = 1 << 31


def sn_add(a: int, n: int) -> int:
    """``a + n`` modulo 2**32."""
    return (a + n) & MASK


def sn_lt(a: int, b: int) -> bool:
    """a < b; undefined (False) when the two are exactly 2**31 apart."""
    return a != b and ((b - a) & MASK) < HALF


def sn_le(a: int, b: int) -> bool:
    """a <= b."""
    return a == b or sn_lt(a, b)
