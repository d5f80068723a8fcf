"""Connections still in their login: a deadline from accept, and bounds on how many
may be in login at once, from one source address and in total.

A connection is *in login* from the moment it is accepted until its login reaches
the full feature phase of a normal session; the deadline runs from accept, not per
byte, so a login sent one byte at a time is cut like a silent one.  A discovery
session stays in login until it ends: it reaches no data and needs no more than a
SendTargets and a logout, and it must not be a way past the bounds for a peer that
never authenticates.  A connection over a bound is closed at once, before anything
of it is read; a session past its login never counts and is never cut here.

Refusals and timeouts are logged at WARNING with the peer's address, at most once
per :data:`LOG_INTERVAL` each; the ones held back meanwhile are counted, and the
count is logged at the end of the interval, so a flood of connections does not
become a flood of log lines.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

log = logging.getLogger("reservoir.target")

LOG_INTERVAL = 10.0  # seconds between two records of one kind


class RateLimitedLog:
    """WARNING records at most once per ``interval`` seconds; the ones held back in
    between are counted and said in the next record."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        interval: float = LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.what = what  # what the records are about, plural: "connections refused"
        self.interval = interval
        self.clock = clock
        self.held = 0
        self._next = -math.inf

    def warning(self, msg: str, *args: object) -> bool:
        """Logs ``msg % args`` unless one was logged less than ``interval`` s ago;
        True if it was logged."""
        now = self.clock()
        if now < self._next:
            self.held += 1
            return False
        self._next = now + self.interval
        if self.held:
            msg += " (and %d more like it in the last %.0f s)"
            args = (*args, self.held, self.interval)
            self.held = 0
        self.logger.warning(msg, *args)
        return True

    def flush(self) -> None:
        """Says how many records were held back since the last one, if any."""
        if self.held:
            self.logger.warning(
                "%d more %s in the last %.0f s", self.held, self.what, self.interval
            )
            self.held = 0


class PendingLogin:
    """One connection's place among those in login; :meth:`done` gives it back."""

    __slots__ = ("_guard", "address", "started", "timer")

    def __init__(self, guard: LoginGuard, address: str, started: float) -> None:
        self._guard: LoginGuard | None = guard
        self.address = address
        self.started = started
        self.timer: asyncio.TimerHandle | None = None

    def elapsed(self) -> float:
        return asyncio.get_running_loop().time() - self.started

    def done(self) -> None:
        """The connection left its login (or closed): it no longer counts. Idempotent."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        guard, self._guard = self._guard, None
        if guard is not None:
            guard._release(self.address)


class LoginGuard:
    """Admits connections into login under the bounds and arms their deadline."""

    def __init__(self, *, timeout: float, max_pending: int, max_per_address: int) -> None:
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"login_timeout must be a positive number of seconds, not {timeout}")
        for name, value in (
            ("max_pending_logins", max_pending),
            ("max_pending_logins_per_address", max_per_address),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        self.timeout = timeout
        self.max_pending = max_pending
        self.max_per_address = max_per_address
        self._total = 0
        self._per_address: dict[str, int] = {}
        self.refusals = RateLimitedLog(log, "connections refused")
        self.expiries = RateLimitedLog(log, "logins timed out")

    def pending(self, address: str | None = None) -> int:
        """Connections in login: from ``address``, or in total."""
        return self._total if address is None else self._per_address.get(address, 0)

    def admit(
        self, address: str, peer: str, expire: Callable[[PendingLogin], None]
    ) -> PendingLogin | None:
        """A place in login for a connection from ``address`` (``peer`` is its
        address and port, for the log), with ``expire`` called at its deadline;
        None, logged, when a bound is reached: close the connection."""
        why = self._over(address)
        if why is not None:
            _warn(self.refusals, "connection from %s refused: %s", peer, why)
            return None
        self._total += 1
        self._per_address[address] = self._per_address.get(address, 0) + 1
        loop = asyncio.get_running_loop()
        pending = PendingLogin(self, address, loop.time())
        pending.timer = loop.call_later(self.timeout, expire, pending)
        return pending

    def _over(self, address: str) -> str | None:
        if self._per_address.get(address, 0) >= self.max_per_address:
            return (
                f"{self.max_per_address} connections from {address} already in login"
                " (max_pending_logins_per_address)"
            )
        if self._total >= self.max_pending:
            return f"{self.max_pending} connections already in login (max_pending_logins)"
        return None

    def _release(self, address: str) -> None:
        self._total -= 1
        left = self._per_address[address] - 1
        if left:
            self._per_address[address] = left
        else:
            del self._per_address[address]

    def log_expired(self, what: str, elapsed: float) -> None:
        """``what`` says whose login, e.g. "login from 192.0.2.1:40000 not complete"."""
        _warn(
            self.expiries,
            "%s after %.1f s (login timeout %g s): closing",
            what,
            elapsed,
            self.timeout,
        )


def _warn(records: RateLimitedLog, msg: str, *args: object) -> None:
    """A rate-limited WARNING; the first one held back schedules the count of them."""
    if not records.warning(msg, *args) and records.held == 1:
        asyncio.get_running_loop().call_later(records.interval, records.flush)
