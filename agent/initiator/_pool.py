"""Warm sessions: logged-in iSCSI sessions kept between copies, a pool per path.

A copy that ends gives its healthy sessions back; the next copy over the same path
takes them instead of connecting and logging in, and starts on a connection whose
congestion window is still open (the host's ``net.ipv4.tcp_slow_start_after_idle=0``
keeps it open while idle: see config/tuning). A session is reused only under the
same :class:`SessionKey`: portal, target, initiator name, CHAP identity, local
address and transport (TCP or MPTCP, with its congestion control).

Idle sessions are pinged (NOP-Out) every ``ping_interval`` and logged out after
``idle_timeout``, when a ping fails, when they stop being :attr:`reusable
<Poolable.reusable>` (their connection dropped), to make room (the longest idle
first, per key and in total) and when the pool closes. What a session carries of the
copy that used it (persistent reservation registrations, caps on its socket) is that
copy's to undo before giving it back (see ``reservoir.agent.transfer._endpoints``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from reservoir.agent.initiator._errors import InitiatorError

__all__ = ["PoolSettings", "PoolStats", "Poolable", "SessionKey", "SessionPool", "chap_identity"]

log = logging.getLogger("reservoir.initiator")


class Poolable(Protocol):
    """What the pool needs of a session (:class:`~reservoir.agent.initiator.Session`)."""

    @property
    def reusable(self) -> bool: ...

    async def ping(self, timeout: float = ...) -> None: ...

    async def close(self) -> None: ...


S = TypeVar("S", bound=Poolable)


def chap_identity(chap: tuple[str, str] | None, mutual: tuple[str, str] | None) -> str:
    """A digest of the CHAP credentials both ways ("" without CHAP): a session logged in
    with other credentials, or another secret, is another session."""
    if chap is None and mutual is None:
        return ""
    text = "\0".join(part for pair in (chap, mutual) for part in (pair or ("", "")))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class SessionKey:
    """Everything that makes one logged-in session usable in place of another."""

    host: str
    port: int
    target: str
    initiator_name: str
    credentials: str = ""  # chap_identity()
    local_address: str | None = None
    transport: str = "tcp"  # "tcp" or "mptcp", "/" its congestion control if chosen


@dataclass(frozen=True, slots=True)
class PoolSettings:
    idle_timeout: float = 90.0  # s an unused session is kept
    ping_interval: float = 10.0  # s between NOP-Out pings of idle sessions
    ping_timeout: float = 5.0
    per_key: int = 64  # idle sessions kept per key (path)
    total: int = 256  # idle sessions kept in all


@dataclass
class PoolStats:
    taken: int = 0  # sessions handed to a user again (each saves a connect and a login)
    kept: int = 0  # sessions given back and kept
    refused: int = 0  # given back and logged out: not reusable, or the pool closed
    evicted: int = 0  # logged out to make room
    expired: int = 0  # logged out after idle_timeout
    ping_failed: int = 0  # logged out after a failed ping, or dropped while idle
    idle: int = 0  # kept now


@dataclass(eq=False)  # one entry is itself only: removed by identity
class _Idle(Generic[S]):
    session: S
    since: float


@dataclass
class SessionPool(Generic[S]):
    """Idle sessions by key. :meth:`take` and :meth:`put` from the event loop's thread;
    :meth:`close` when done (the agent's stop)."""

    settings: PoolSettings = field(default_factory=PoolSettings)
    clock: Callable[[], float] = time.monotonic
    counts: PoolStats = field(default_factory=PoolStats)
    _idle: dict[SessionKey, list[_Idle[S]]] = field(default_factory=dict)
    _closed: bool = False
    _keeper: asyncio.Task[None] | None = None
    _closing: set[asyncio.Task[None]] = field(default_factory=set)

    def take(self, key: SessionKey) -> S | None:
        """The most recently given back reusable session of ``key`` (its window the
        freshest), or None; the unusable ones met on the way are logged out."""
        entries = self._idle.get(key, [])
        while entries:
            session = entries.pop().session
            if session.reusable:
                self.counts.taken += 1
                self._tidy(key)
                return session
            self.counts.ping_failed += 1
            self._close_later(session)
        self._tidy(key)
        return None

    async def put(self, key: SessionKey, session: S) -> bool:
        """Keeps ``session`` for the next user of ``key``; logs it out instead (False)
        when it is not reusable or the pool is closed."""
        if self._closed or not session.reusable:
            self.counts.refused += 1
            await _logout(session)
            return False
        entries = self._idle.setdefault(key, [])
        entries.append(_Idle(session, self.clock()))
        self.counts.kept += 1
        await self._make_room(key)
        self._keep_alive()
        return True

    def stats(self) -> PoolStats:
        self.counts.idle = sum(len(e) for e in self._idle.values())
        return dataclasses.replace(self.counts)

    async def sweep(self) -> None:
        """Logs out the sessions idle for ``idle_timeout`` and pings the others: one
        that does not answer is logged out (unless taken meanwhile)."""
        now = self.clock()
        expired = [
            (key, entry)
            for key, entries in self._idle.items()
            for entry in entries
            if now - entry.since >= self.settings.idle_timeout
        ]
        for key, entry in expired:
            self._remove(key, entry)
            self.counts.expired += 1
        alive = [(key, entry) for key, entries in self._idle.items() for entry in entries]
        await asyncio.gather(
            *(_logout(entry.session) for _, entry in expired),
            *(self._ping(key, entry) for key, entry in alive),
        )

    async def close(self) -> None:
        """Logs out every idle session; sessions given back later are logged out too."""
        self._closed = True
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        idle = [entry.session for entries in self._idle.values() for entry in entries]
        self._idle.clear()
        await asyncio.gather(*(_logout(s) for s in idle), *self._closing)

    async def _ping(self, key: SessionKey, entry: _Idle[S]) -> None:
        try:
            if not entry.session.reusable:
                raise InitiatorError("connection dropped while idle")
            await entry.session.ping(self.settings.ping_timeout)
        except (InitiatorError, OSError, TimeoutError) as exc:
            if self._remove(key, entry):  # not taken while the ping was out
                log.info("warm session to %s:%d dropped: %s", key.host, key.port, exc)
                self.counts.ping_failed += 1
                await _logout(entry.session)

    async def _make_room(self, key: SessionKey) -> None:
        """Evicts the longest idle sessions of ``key`` beyond ``per_key``, then the
        longest idle of all beyond ``total``."""
        evict: list[S] = []
        entries = self._idle[key]
        while len(entries) > self.settings.per_key:
            evict.append(entries.pop(0).session)
        while sum(len(e) for e in self._idle.values()) > self.settings.total:
            oldest = min(
                ((k, e[0]) for k, e in self._idle.items() if e), key=lambda ke: ke[1].since
            )
            self._remove(*oldest)
            evict.append(oldest[1].session)
        self.counts.evicted += len(evict)
        await asyncio.gather(*(_logout(s) for s in evict))

    def _remove(self, key: SessionKey, entry: _Idle[S]) -> bool:
        entries = self._idle.get(key, [])
        if entry not in entries:
            return False
        entries.remove(entry)
        self._tidy(key)
        return True

    def _tidy(self, key: SessionKey) -> None:
        if not self._idle.get(key, True):
            del self._idle[key]

    def _keep_alive(self) -> None:
        """The task that sweeps every ``ping_interval`` (started with the first session
        kept, in the event loop of the caller)."""
        if self._keeper is None:
            self._keeper = asyncio.get_running_loop().create_task(self._keep())

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self.settings.ping_interval)
            await self.sweep()

    def _close_later(self, session: S) -> None:
        task = asyncio.get_running_loop().create_task(_logout(session))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)


async def _logout(session: Poolable) -> None:
    with contextlib.suppress(InitiatorError, OSError, TimeoutError):
        await session.close()
