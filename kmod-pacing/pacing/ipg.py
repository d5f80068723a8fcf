"""Inter-packet gap <-> rate, the Data Reservoir "IPG widening" arithmetic (design 3.3).

The paper patched e1000 to widen the gap between frames to 1023 byte times,
so each NIC sent an even packet train below line rate instead of line-rate
bursts. Every frame of ``frame`` bytes occupies ``frame + 20`` byte times on the
wire (20 = 8 bytes of preamble/SFD + the standard 12-byte gap); an extra gap of
``g`` byte times stretches that to ``frame + 20 + g``, so::

    rate = line_rate * (frame + 20) / (frame + 20 + g)
    g    = (frame + 20) * (line_rate / rate - 1)

``rate`` is on the same scale as ``line_rate`` (wire occupancy, preamble and
standard gap included), which is how the paper stated it. Today the same rate
is set with a qdisc (:mod:`reservoir.pacing.nic`); this module translates the
paper's knob into that rate and back.
"""

from __future__ import annotations

import math

PREAMBLE_AND_GAP = 20
"""Byte times every frame costs besides itself: 8 preamble/SFD + 12 standard gap."""

MIN_FRAME = 64
MAX_FRAME = 65_535
E1000_MAX_GAP = 1023
"""The widest gap the e1000 TIPG register holds (the paper's setting)."""


def _check_frame(frame: int) -> None:
    if isinstance(frame, bool) or not isinstance(frame, int):
        raise ValueError(f"frame size must be an integer number of bytes, not {frame!r}")
    if not MIN_FRAME <= frame <= MAX_FRAME:
        raise ValueError(f"frame size must be {MIN_FRAME}..{MAX_FRAME} bytes, not {frame}")


def _check_positive(name: str, value: float) -> None:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, not {value!r}")


def rate_from_gap(extra_gap: float, frame: int, line_rate_bps: float) -> float:
    """The rate (bit/s, wire scale) of back-to-back ``frame``-byte frames sent
    with ``extra_gap`` byte times added to the standard gap."""
    _check_frame(frame)
    _check_positive("line rate", line_rate_bps)
    if not math.isfinite(extra_gap) or extra_gap < 0:
        raise ValueError(f"extra gap must be a finite number of byte times >= 0, not {extra_gap!r}")
    slot = frame + PREAMBLE_AND_GAP
    return line_rate_bps * slot / (slot + extra_gap)


def gap_from_rate(rate_bps: float, frame: int, line_rate_bps: float) -> float:
    """The extra gap (byte times, fractional) that brings ``frame``-byte frames
    down to ``rate_bps``; hardware takes ``math.ceil`` of it (a rate at or below)."""
    _check_frame(frame)
    _check_positive("line rate", line_rate_bps)
    _check_positive("rate", rate_bps)
    if rate_bps > line_rate_bps:
        raise ValueError(f"rate {rate_bps:g} bit/s is above the line rate {line_rate_bps:g} bit/s")
    return (frame + PREAMBLE_AND_GAP) * (line_rate_bps / rate_bps - 1)
