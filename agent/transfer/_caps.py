"""Per-stream cwnd caps and pacing rates of a running copy (set by a coordinator).

The equalizer decides caps from telemetry; the agent applies them to its streams'
sockets through a :class:`Capper` (the pacing component: a BPF sock_ops program
clamping the congestion window, or SO_MAX_PACING_RATE where BPF is not allowed).  A
stream's socket changes when its session reconnects, so :meth:`StreamCaps.tick`
(called by the engine twice a second) applies the wanted caps to whatever socket each
stream has now, refreshes rate-based fallbacks (they depend on the RTT) and lifts the
caps that are no longer wanted.

A connection that was jump-started (see reservoir.agent.initiator._jump) comes paced
at its share of the NIC, so that its large first window leaves over a round trip.
Unless the coordinator paces the stream itself, that pacing is lifted once the
stream has run JUMP_PACED round trips (at least JUMP_PACED_MIN seconds): by then the
congestion control has measured the path, and a stream held to an even share could
not take up what the others leave at the end of the copy.

A stream capped through the BPF clamp is also paced at cap x MSS / srtt, as the
fallback paces every capped stream (refreshed on every tick, as srtt changes). The
clamp alone bounds the window, which is not what bounds every stream's rate: CUBIC
keeps a window that is already above the clamp until a loss (it only grows towards
it), and BBR sends at its own bandwidth estimate, with a window of twice the path's
delay-bandwidth product, so a cap between one and two of those held nothing (the
3-path 350 ms lab, 24 streams: Jain 0.96 with the clamp alone, 0.99 with the fallback).
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from reservoir.agent.telemetry import sample
from reservoir.common.errors import ReservoirError

log = logging.getLogger("reservoir.copy")

SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)
NO_PACING = (1 << 64) - 1  # the kernel's "unlimited" (~0UL)
RATE_BASED = "so-max-pacing-rate"  # the mechanism name of the fallback cwnd cap

SocketOf = Callable[[], socket.socket | None]
JUMP_PACED = 6  # round trips a jump-started stream keeps its starting pace
JUMP_PACED_MIN = 1.0  # seconds, at the least


class Capper(Protocol):
    """What applies a cwnd cap to one connection (reservoir.pacing.CwndCaps)."""

    @property
    def mechanism(self) -> str: ...

    def set(self, sock: socket.socket, segments: int) -> None: ...

    def clear(self, sock: socket.socket) -> None: ...

    def refresh(self, sock: socket.socket) -> object: ...

    def jumped(self, sock: socket.socket) -> int: ...


@dataclass
class _Applied:
    sock: socket.socket
    cwnd: int | None = None
    pacing: int | None = None
    since: float = 0.0  # when the stream began on this socket (monotonic)
    start_paced: bool = False  # carries the pace of its jump start
    cap_paced: bool = False  # paced at its cwnd cap's rate (with the BPF clamp)


class StreamCaps:
    """The caps a copy's streams should have, and what is applied to which socket."""

    def __init__(self, capper: Capper | None) -> None:
        self.capper = capper
        self.cwnd: dict[int, int] = {}  # stream -> segments
        self.pacing: dict[int, int] = {}  # stream -> bytes per second
        self._streams: dict[int, SocketOf] = {}
        self._applied: dict[int, _Applied] = {}
        self.errors: dict[int, str] = {}  # stream -> why its caps could not be applied
        self.jumped: dict[int, int] = {}  # stream -> first window of a jump start (segments)

    @property
    def mechanism(self) -> str:
        return self.capper.mechanism if self.capper is not None else "none"

    def want(self, cwnd: dict[int, int], pacing: dict[int, int]) -> None:
        """Replaces the wanted caps; the next :meth:`tick` applies them."""
        if cwnd and self.capper is None:
            raise ValueError("no cwnd cap mechanism on this agent")
        self.cwnd, self.pacing = dict(cwnd), dict(pacing)

    def attach(self, stream: int, socket_of: SocketOf) -> None:
        """A stream (re)opened: its caps are applied at once, then on every tick."""
        self._streams[stream] = socket_of
        self._tick_one(stream, socket_of)

    def detach(self, stream: int) -> None:
        self._streams.pop(stream, None)
        self._applied.pop(stream, None)

    def lift(self) -> None:
        """Takes every cap off the streams' sockets and forgets the streams: the copy
        ends, and its sockets may carry the next copy (a pool of warm sessions)."""
        for stream, applied in list(self._applied.items()):
            try:
                self._lift(applied)
            except (OSError, ReservoirError) as exc:  # closed meanwhile, or the capper's CapError
                log.debug("stream %d: caps not lifted: %s", stream, exc)
        self._streams.clear()
        self._applied.clear()

    def _lift(self, applied: _Applied) -> None:
        if applied.cwnd is not None and self.capper is not None:
            self.capper.clear(applied.sock)
        if (
            applied.pacing is not None
            or self._rate_capped(applied)
            or applied.start_paced
            or applied.cap_paced
        ):
            set_pacing_rate(applied.sock, NO_PACING)

    def tick(self) -> None:
        for stream, socket_of in list(self._streams.items()):
            self._tick_one(stream, socket_of)

    def _tick_one(self, stream: int, socket_of: SocketOf) -> None:
        sock = socket_of()
        if sock is None:
            return
        try:
            self._apply(stream, sock)
        except (OSError, ReservoirError) as exc:  # the capper's CapError
            if self.errors.get(stream) != str(exc):  # once, not on every tick
                log.warning("stream %d: caps not applied: %s", stream, exc)
            self.errors[stream] = str(exc)
        else:
            self.errors.pop(stream, None)

    def _apply(self, stream: int, sock: socket.socket) -> None:
        applied = self._applied.get(stream)
        if applied is None or applied.sock is not sock:
            applied = _Applied(sock, since=time.monotonic(), start_paced=_start_paced(sock))
            self._applied[stream] = applied
            if self.capper is not None and (window := self.capper.jumped(sock)):
                self.jumped[stream] = window
        self._apply_cwnd(applied, self.cwnd.get(stream))
        self._apply_pacing(applied, self.pacing.get(stream))
        self._end_start_pace(applied)
        self._pace_to_cap(applied)

    def _end_start_pace(self, applied: _Applied) -> None:
        """Lifts a jump start's pacing once the stream has run long enough (not a
        rate the coordinator or a rate-based cap set: those own the option then)."""
        if not applied.start_paced:
            return
        if applied.pacing is not None or self._rate_capped(applied):
            applied.start_paced = False
            return
        held = max(JUMP_PACED_MIN, JUMP_PACED * (sample(applied.sock).rtt or 0) / 1e6)
        if time.monotonic() - applied.since < held:
            return
        applied.start_paced = False
        if pacing_rate(applied.sock) != NO_PACING:
            set_pacing_rate(applied.sock, NO_PACING)

    def _rate_capped(self, applied: _Applied) -> bool:
        """Whether the stream's cwnd cap is itself a pacing rate (the fallback)."""
        return applied.cwnd is not None and self.mechanism == RATE_BASED

    def _apply_cwnd(self, applied: _Applied, wanted: int | None) -> None:
        if self.capper is None or wanted == applied.cwnd:
            if self.capper is not None and wanted is not None:
                self.capper.refresh(applied.sock)  # a rate-based cap follows the RTT
            return
        if wanted is None:
            self.capper.clear(applied.sock)
        else:
            self.capper.set(applied.sock, wanted)
        applied.cwnd = wanted

    def _apply_pacing(self, applied: _Applied, wanted: int | None) -> None:
        """SO_MAX_PACING_RATE.  Where the cwnd cap is itself a pacing rate (the
        fallback), both share the option: the lower one is kept, every tick."""
        shared = self._rate_capped(applied)
        if wanted == applied.pacing and not shared:
            return
        applied.pacing = wanted
        if shared:
            if wanted is not None:
                set_pacing_rate(applied.sock, min(pacing_rate(applied.sock), wanted))
            return
        set_pacing_rate(applied.sock, NO_PACING if wanted is None else wanted)

    def _pace_to_cap(self, applied: _Applied) -> None:
        """With the BPF clamp: paces a capped stream at its cap's rate (never above the
        coordinator's rate for it), and lets it go when the cap goes."""
        if self.mechanism == RATE_BASED or applied.start_paced:
            return
        rate = None if applied.cwnd is None else _cap_rate(applied.sock, applied.cwnd)
        if rate is not None:
            set_pacing_rate(
                applied.sock, rate if applied.pacing is None else min(rate, applied.pacing)
            )
            applied.cap_paced = True
        elif applied.cap_paced:
            set_pacing_rate(applied.sock, NO_PACING if applied.pacing is None else applied.pacing)
            applied.cap_paced = False

    def applied(self) -> dict[int, tuple[int | None, int | None]]:
        """stream -> (cwnd cap, pacing rate) as applied to its current socket."""
        return {s: (a.cwnd, a.pacing) for s, a in self._applied.items()}


def _start_paced(sock: socket.socket) -> bool:
    """Whether ``sock`` comes paced (the jump connector paces what it connects)."""
    try:
        return pacing_rate(sock) != NO_PACING
    except OSError:  # a socket that has no such option (MPTCP): not one it made
        return False


def _cap_rate(sock: socket.socket, cap: int) -> int | None:
    """cap x MSS / srtt in bytes/s; None where TCP_INFO has no srtt or MSS yet."""
    info = sample(sock)
    if not info.snd_mss or not info.rtt:
        return None
    return -(-cap * info.snd_mss * 1_000_000 // info.rtt)


def pacing_rate(sock: socket.socket) -> int:
    """SO_MAX_PACING_RATE of ``sock`` in bytes per second (NO_PACING: unlimited)."""
    value: int = struct.unpack("=Q", sock.getsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, 8))[0]
    return value


def set_pacing_rate(sock: socket.socket, rate: int) -> None:
    """As a 64-bit value: the kernel takes either width, and ~0 means unlimited."""
    sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, struct.pack("=Q", rate))
