"""One coordinator leads, the others stand by: a lease row in the shared database.

Any number of coordinators may serve the API on one database (PostgreSQL in
production). Only the leader runs what acts on its own: the scheduler, the telemetry
collector, the equalizer, the recovery of link probes and the watcher of campaign
runs. A standby serves every read and every change the database carries by itself
(registering, creating, pausing or cancelling transfers: the leader's scheduler
acts on them at its next pass); what runs in the coordinator's own process (a link
probe, a campaign run) is refused on a standby with 503 ``not_leader``, naming the
leader.

The lease (table ``coordinator_leases``, row ``leader``) is taken and renewed by one
conditional UPDATE: it succeeds for its holder, or for anyone once the lease has run
out. Its times are the database's clock, so coordinators whose clocks differ agree.
The leader renews every ``lease / 3`` seconds; it counts its lease from *before* each
renewal by its own monotonic clock, and stops leading as soon as that runs out
without a renewal (a database it cannot reach, a renewal that hangs), which is before
the database lets a standby take it. A standby tries at the same pace, so it leads
within ``lease + lease / 3`` seconds of a leader's death. A leader that stops in
order gives the lease back, and a standby takes it at its next try; a coordinator
killed and started again waits for its old lease to run out, as a standby would.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Float, case, cast, func, literal, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from reservoir.common.aio import cancel_and_wait
from reservoir.server.app.tables import CoordinatorLease

__all__ = ["LEASE", "Leadership", "LeaseView", "holder_name"]

LEASE = "leader"
log = logging.getLogger("reservoir.server.leadership")

Hook = Callable[[], Awaitable[None]]


def holder_name(listen: str | None = None) -> str:
    """This coordinator's name in the lease: its host, the address it listens on, its
    PID and a random part. Unique per process: two coordinators with the same host name
    and address (two network namespaces of one host) must never both hold the lease,
    so a coordinator killed and started again waits for its old lease to run out."""
    return f"{socket.gethostname()}/{listen or '-'}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class LeaseView:
    """The lease as the database has it: ``holder`` "" when nobody leads;
    ``expires_in`` seconds (negative once run out)."""

    holder: str
    url: str | None
    expires_in: float

    @property
    def leader_url(self) -> str | None:
        """Where the leader serves, while someone holds an unexpired lease."""
        return self.url if self.holder and self.expires_in > 0 else None


class Leadership:
    """Takes, keeps and gives back the lease; calls ``on_elected`` when this coordinator
    starts leading and ``on_deposed`` when it stops (both awaited in the loop's task)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        lease: float,
        url: str | None,
        on_elected: Hook,
        on_deposed: Hook,
        holder: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if lease <= 0:
            raise ValueError(f"the lease must be positive, not {lease}")
        self.sessions = sessions
        self.lease = lease
        self.interval = lease / 3
        self.url = url
        self.holder = holder or holder_name()
        self.on_elected = on_elected
        self.on_deposed = on_deposed
        self.clock = clock
        self.leading = False
        self._valid_until = 0.0
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ the loop

    async def start(self) -> None:
        """One try now (a lone coordinator leads before it serves), then the loop."""
        await self.attempt()
        self._task = asyncio.create_task(self._run(), name="reservoir-leadership")

    async def stop(self) -> None:
        """Stops trying; a leader stops leading and gives the lease back."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        if self.leading:
            await self._depose("the coordinator is stopping", level=logging.INFO)
            try:
                await asyncio.to_thread(self._release)
            except Exception:
                log.exception("giving the lease back failed; it runs out by itself")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.attempt()

    async def attempt(self) -> None:
        """One try to take or renew the lease, and what follows from its answer."""
        started = self.clock()
        try:
            held = await self._hold(started)
        except Exception as exc:  # the database or the renewal: keep the lease while valid
            log.warning("the leader's lease could not be renewed: %s", exc)
            held = None
        if held:
            self._valid_until = started + self.lease
            if not self.leading:
                self.leading = True
                log.info("leading: this coordinator (%s) holds the lease", self.holder)
                await self.on_elected()
        elif self.leading and (held is False or self.clock() >= self._valid_until):
            reason = "another coordinator holds the lease" if held is False else "lease ran out"
            await self._depose(reason)

    async def _hold(self, started: float) -> bool:
        """The UPDATE in a thread; a leader waits for it only while its lease is valid
        (``asyncio.wait``, not ``wait_for``: on Python 3.11 that loses a cancellation
        arriving as the UPDATE returns, and the coordinator would never stop)."""
        call = asyncio.ensure_future(asyncio.to_thread(self._try_hold))
        call.add_done_callback(_retrieve)
        timeout = None if not self.leading else max(0.0, self._valid_until - started)
        done, _ = await asyncio.wait({call}, timeout=timeout)
        if not done:
            raise TimeoutError("the lease's UPDATE took longer than the lease is valid")
        return call.result()

    async def _depose(self, reason: str, level: int = logging.WARNING) -> None:
        self.leading = False
        log.log(level, "no longer leading: %s", reason)
        await self.on_deposed()

    # ------------------------------------------------------------ the database

    def _try_hold(self) -> bool:
        """Takes the lease if it is ours or has run out; True if we hold it now."""
        lease = CoordinatorLease
        with self.sessions() as session:
            now = db_clock(session)
            ours_or_free = or_(lease.holder == self.holder, lease.expires_at < now)
            done = session.execute(
                update(lease)
                .where(lease.name == LEASE, ours_or_free)
                .values(
                    holder=self.holder,
                    url=self.url,
                    expires_at=now + self.lease,
                    acquired_at=case((lease.holder == self.holder, lease.acquired_at), else_=now),
                )
                .execution_options(synchronize_session=False)
            )
            session.commit()
            return bool(getattr(done, "rowcount", 0) == 1)

    def _release(self) -> None:
        lease = CoordinatorLease
        with self.sessions() as session:
            session.execute(
                update(lease)
                .where(lease.name == LEASE, lease.holder == self.holder)
                .values(holder="", expires_at=0.0)
                .execution_options(synchronize_session=False)
            )
            session.commit()

    def view(self) -> LeaseView | None:
        """The lease as it stands (None where the database has no lease row)."""
        return current_lease(self.sessions)


def current_lease(sessions: sessionmaker[Session]) -> LeaseView | None:
    """The leader's lease as the database has it."""
    lease = CoordinatorLease
    with sessions() as session:
        now = db_clock(session)
        row = session.execute(
            select(lease.holder, lease.url, lease.expires_at - now).where(lease.name == LEASE)
        ).first()
    if row is None:
        return None
    holder, url, left = row
    return LeaseView(holder=holder, url=url, expires_in=float(left))


def db_clock(session: Session) -> ColumnElement[float]:
    """The database's time in seconds since the epoch, as an SQL expression."""
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        return cast(func.extract("epoch", func.clock_timestamp()), Float)
    if bind.dialect.name == "sqlite":
        return (func.julianday("now") - literal(2440587.5)) * literal(86400.0)
    raise NotImplementedError(f"no lease clock for the {bind.dialect.name} database")


def _retrieve(future: asyncio.Future[bool]) -> None:
    """Reads a left UPDATE's outcome, so its error is not logged as never retrieved."""
    if not future.cancelled():
        future.exception()
