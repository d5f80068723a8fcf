"""Sizes as people write them: ``8MiB``, ``8M``, ``512k``, ``1.5G``, ``4096``.

K, M, G and T are binary (1024-based), with or without ``i`` and ``B`` (``8M``,
``8MB`` and ``8MiB`` are all 8 x 2^20 bytes), in either case; a bare number is
bytes, and ``0x`` numbers are read as hexadecimal. Every command that takes a size
takes it this way.
"""

from __future__ import annotations

import argparse
import re

__all__ = ["parse_rate", "parse_size", "rate_arg", "size_arg"]

_RATE_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_RATE = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(?:BIT/S|BITS?|BPS|B/S)?\s*", re.IGNORECASE)

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(?:I?B)?\s*", re.IGNORECASE)


def parse_size(text: str, *, minimum: int = 1, multiple: int = 1) -> int:
    """Bytes of ``text``; ValueError, in words, when it is not a size, is below
    ``minimum`` or is not a multiple of ``multiple``."""
    if text.strip().lower().startswith("0x"):
        try:
            value = int(text, 16)
        except ValueError:
            raise ValueError(f"{text!r} is not a size (e.g. 8MiB, 512K, 4096)") from None
    else:
        found = _SIZE.fullmatch(text)
        if found is None:
            raise ValueError(f"{text!r} is not a size (e.g. 8MiB, 512K, 4096)")
        number = float(found[1]) * _UNITS[found[2].upper()]
        if number != int(number):
            raise ValueError(f"{text!r} is not a whole number of bytes")
        value = int(number)
    if value < minimum:
        raise ValueError(f"{text!r}: at least {minimum} bytes")
    if value % multiple:
        raise ValueError(f"{text!r}: a multiple of {multiple} bytes")
    return value


def size_arg(text: str) -> int:
    """An argparse ``type``: a positive size (see :func:`parse_size`)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_rate(text: str) -> int:
    """Bits per second of a line rate as people write it: ``10G``, ``25Gbit``,
    ``400Mbps``, ``1.5G`` (K, M, G, T decimal, as network rates are); ValueError in words."""
    found = _RATE.fullmatch(text)
    if found is None:
        raise ValueError(f"{text!r} is not a rate in bits/s (e.g. 10G, 25Gbit, 400Mbps)")
    value = round(float(found[1]) * _RATE_UNITS[found[2].upper()])
    if value <= 0:
        raise ValueError(f"{text!r}: a rate above zero")
    return value


def rate_arg(text: str) -> int:
    """:func:`parse_rate` for argparse (its error becomes a usage error)."""
    try:
        return parse_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
