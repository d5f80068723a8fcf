"""The fallback cap: a per-socket pacing rate of ``cap x MSS / srtt`` (SO_MAX_PACING_RATE).

TCP's internal pacing honours SO_MAX_PACING_RATE without sch_fq (design 4), with BBR and
CUBIC. A window of ``cap`` segments per round trip is the rate ``cap x MSS / srtt``, so the
socket sends no faster than a connection whose cwnd were capped; as srtt changes the rate
must be recomputed (:func:`apply`, called again by ``CwndCaps.refresh``).
"""

from __future__ import annotations

import socket
import struct

from reservoir.agent.telemetry import sample
from reservoir.pacing.errors import PacingError

__all__ = ["SO_MAX_PACING_RATE", "UNLIMITED", "apply", "clear", "pacing_rate"]

SO_MAX_PACING_RATE = 47
#: The kernel's "no limit" (~0UL); passed as a u64, which also allows rates above 4 GB/s.
UNLIMITED = 2**64 - 1


class NoRttSampleError(PacingError):
    """TCP_INFO has no srtt or MSS yet, so no rate can be derived from a window."""


def pacing_rate(segments: int, mss: int, srtt_us: int) -> int:
    """Bytes/s of ``segments`` x ``mss`` bytes per ``srtt_us`` microseconds, rounded up."""
    if segments <= 0 or mss <= 0 or srtt_us <= 0:
        raise ValueError(f"need positive segments, mss and srtt: {segments}, {mss}, {srtt_us}")
    return -(-segments * mss * 1_000_000 // srtt_us)


def _set_rate(sock: socket.socket, rate: int) -> None:
    sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, struct.pack("=Q", rate))


def apply(sock: socket.socket, segments: int) -> int:
    """Pace ``sock`` at ``segments`` x MSS / srtt from its TCP_INFO now; return the rate."""
    info = sample(sock)
    if not info.snd_mss or not info.rtt:
        raise NoRttSampleError(
            f"no MSS or srtt in TCP_INFO yet (mss={info.snd_mss}, rtt={info.rtt})"
        )
    rate = pacing_rate(segments, info.snd_mss, info.rtt)
    _set_rate(sock, rate)
    return rate


def clear(sock: socket.socket) -> None:
    """Remove the pacing limit of ``sock``."""
    _set_rate(sock, UNLIMITED)
