"""Per-connection cwnd caps for the stream equalizer (design 3.2).

:class:`CwndCaps` caps the congestion window of chosen TCP connections of this process:

* ``"bpf-sndcwnd-clamp"``: the sock_ops program ``bpf/cwnd_clamp.bpf.c`` sets
  TCP_BPF_SNDCWND_CLAMP on the connection (exact, re-applied on RTT callbacks when the
  cap changes). Covers the sockets the process creates *after* :meth:`CwndCaps.open`
  (see ``_bpf`` for the cgroup it uses).
* ``"so-max-pacing-rate"``: where BPF is not possible, each capped socket is paced at
  ``cap x MSS / srtt`` (SO_MAX_PACING_RATE); call :meth:`CwndCaps.refresh` as srtt
  changes (the telemetry interval is a good moment). ``why_not_bpf`` says why.

The BPF program also starts connections at speed (a *jump start*, design 3.3): a socket
announced with :meth:`CwndCaps.jump_start` before it connects begins with the window
that carries its paced rate for a round trip, and a port given to
:meth:`CwndCaps.open_window` offers a large receive window from the first segment.
Without BPF neither happens (:attr:`CwndCaps.can_jump` is False).

Errors: :class:`CapError` for a socket that cannot be capped (not covered by the program,
no RTT sample yet); :class:`OSError` from the kernel otherwise.
"""

from __future__ import annotations

import logging
import socket
import weakref
from pathlib import Path
from types import TracebackType

from reservoir.pacing.errors import PacingError

from . import _socket
from ._bpf import BpfUnavailable, ClampProgram
from ._build import BuildError, build
from ._stale import cleanup_stale

__all__ = ["MECHANISM_BPF", "MECHANISM_PACING", "CapError", "CwndCaps"]

MECHANISM_BPF = "bpf-sndcwnd-clamp"
MECHANISM_PACING = "so-max-pacing-rate"

_log = logging.getLogger(__name__)


class CapError(PacingError):
    """A cap that cannot be applied to this socket; the message says why."""


class CwndCaps:
    """Caps on the cwnd (segments) of this process's TCP connections. A context manager."""

    def __init__(self, program: ClampProgram | None, why_not_bpf: str | None) -> None:
        self._program = program
        self.why_not_bpf = why_not_bpf
        self.mechanism = MECHANISM_BPF if program is not None else MECHANISM_PACING
        self._closed = False
        self._paced: weakref.WeakKeyDictionary[socket.socket, int] = weakref.WeakKeyDictionary()

    @classmethod
    def open(cls, *, use_bpf: bool = True, cgroup: Path | None = None) -> CwndCaps:
        """Load and attach the BPF program, or fall back to pacing rates (reason recorded).

        ``use_bpf=False`` forces the fallback; ``cgroup`` attaches to that cgroup v2
        directory instead of a dedicated child cgroup the process is moved into.
        """
        if not use_bpf:
            return cls(None, "disabled by the caller (use_bpf=False)")
        for leftover in cleanup_stale():
            _log.info("removed what a killed process left: %s", leftover)
        try:
            program = ClampProgram.open(build(), cgroup)
        except (BuildError, BpfUnavailable, OSError) as e:
            _log.info("cwnd caps fall back to SO_MAX_PACING_RATE: %s", e)
            return cls(None, str(e))
        return cls(program, None)

    @property
    def cgroup(self) -> Path | None:
        """The cgroup v2 directory the program is attached to (None without BPF)."""
        return self._program.cgroup if self._program is not None else None

    def set(self, sock: socket.socket, segments: int) -> None:
        """Cap the cwnd of the connected TCP socket ``sock`` at ``segments`` (>= 1)."""
        if segments < 1:
            raise ValueError(f"a cwnd cap is at least 1 segment, not {segments}")
        self._check_open()
        if self._program is not None:
            if not self._program.covers(sock):
                raise CapError(
                    "the BPF program does not see this connection: its socket was created "
                    f"outside {self._program.cgroup} or before CwndCaps.open()"
                )
            self._program.set(sock, segments)
            _log.debug("cwnd cap %s: %d segments (bpf)", _name(sock), segments)
            return
        try:
            rate = _socket.apply(sock, segments)
        except _socket.NoRttSampleError as e:
            raise CapError(str(e)) from e
        self._paced[sock] = segments
        _log.debug("cwnd cap %s: %d segments = %d B/s (pacing)", _name(sock), segments, rate)

    def clear(self, sock: socket.socket) -> None:
        """Remove the cap of ``sock`` (nothing if it had none)."""
        self._check_open()
        if self._program is not None:
            self._program.clear(sock)
        elif self._paced.pop(sock, None) is not None:
            _socket.clear(sock)
        _log.debug("cwnd cap %s: none", _name(sock))

    def refresh(self, sock: socket.socket) -> int | None:
        """Re-derive the pacing rate of a capped socket from its srtt now; the rate, or None.

        Nothing to do with BPF (the kernel clamps the window itself) or without a cap.
        """
        segments = self._paced.get(sock)
        if segments is None:
            return None
        try:
            return _socket.apply(sock, segments)
        except _socket.NoRttSampleError as e:
            raise CapError(str(e)) from e

    def applied(self, sock: socket.socket) -> int | None:
        """The cap the kernel last applied to ``sock`` (BPF only; 0 = none; None if unknown)."""
        if self._program is None:
            return self._paced.get(sock)
        return self._program.applied(sock)

    @property
    def can_jump(self) -> bool:
        """Whether connections can be jump-started here (the BPF program is loaded)."""
        return self._program is not None and not self._closed

    def jump_start(self, sock: socket.socket, remote: tuple[str, int], rate: int) -> bytes:
        """Announce that ``sock``, bound to its local port and not yet connected, will
        connect to ``remote`` and is paced at ``rate`` bytes per second: the kernel
        then gives it an initial window of rate x srtt / mss segments (at least the
        usual 10). Returns the announcement's key for :meth:`withdraw_start`."""
        if rate < 1:
            raise ValueError(f"a jump start needs a rate of at least 1 byte/s, not {rate}")
        self._check_open()
        if self._program is None:
            raise CapError(f"no jump start without the BPF program: {self.why_not_bpf}")
        return self._program.start(sock, remote, rate)

    def withdraw_start(self, key: bytes) -> None:
        """Forget an announcement the connection did not consume (it failed)."""
        if self._program is not None:
            self._program.unstart(key)

    def jumped(self, sock: socket.socket) -> int:
        """The initial window (segments) a jump start gave ``sock``, 0 for none."""
        if self._program is None:
            return 0
        return self._program.jumped(sock) or 0

    def open_window(self, port: int, nbytes: int, mss: int = 1448) -> None:
        """Offer connections accepted on the listening ``port`` (from now on) a receive
        window of ``nbytes`` from their first segment; 0 restores the kernel's."""
        self._check_open()
        if self._program is None:
            raise CapError(f"no initial receive window without the BPF program: {self.why_not_bpf}")
        self._program.open_window(port, -(-nbytes // mss) if nbytes > 0 else 0)

    def _check_open(self) -> None:
        if self._closed:
            raise CapError("CwndCaps is closed")

    def close(self) -> None:
        """Detach and unload the program and undo its setup (pacing rates stay as set)."""
        self._closed = True
        program, self._program = self._program, None
        if program is not None:
            program.close()

    def __enter__(self) -> CwndCaps:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _name(sock: socket.socket) -> str:
    try:
        return f"{sock.getsockname()}->{sock.getpeername()}"
    except OSError:
        return f"fd {sock.fileno()}"
