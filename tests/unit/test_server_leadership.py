"""One coordinator leads: the lease in the shared database, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy.orm import Session, sessionmaker

from reservoir.server.app.leadership import Leadership, current_lease, holder_name


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Member:
    """A coordinator's leadership and what it was told."""

    def __init__(self, sessions: sessionmaker[Session], name: str, lease: float = 30.0) -> None:
        self.calls: list[str] = []
        self.clock = Clock()
        self.leadership = Leadership(
            sessions,
            lease=lease,
            url=f"http://{name}:8470",
            holder=name,
            on_elected=self._elected,
            on_deposed=self._deposed,
            clock=self.clock,
        )

    async def _elected(self) -> None:
        self.calls.append("elected")

    async def _deposed(self) -> None:
        self.calls.append("deposed")

    def attempt(self) -> bool:
        asyncio.run(self.leadership.attempt())
        return self.leadership.leading


def test_the_first_coordinator_leads_and_the_second_stands_by(
    sessions: sessionmaker[Session],
) -> None:
    a, b = Member(sessions, "a"), Member(sessions, "b")
    assert a.attempt() and not b.attempt()
    assert a.attempt() and not b.attempt()  # renewed, still held
    assert a.calls == ["elected"] and b.calls == []
    lease = current_lease(sessions)
    assert lease is not None and lease.holder == "a" and lease.url == "http://a:8470"
    assert 25 < lease.expires_in <= 30


def test_a_lease_given_back_is_taken_at_the_next_try(sessions: sessionmaker[Session]) -> None:
    a, b = Member(sessions, "a"), Member(sessions, "b")
    assert a.attempt()
    asyncio.run(a.leadership.stop())
    assert a.calls == ["elected", "deposed"]
    assert b.attempt() and b.calls == ["elected"]
    lease = current_lease(sessions)
    assert lease is not None and lease.holder == "b"


def test_a_standby_leads_once_a_dead_leaders_lease_runs_out(
    sessions: sessionmaker[Session],
) -> None:
    a, b = Member(sessions, "a", lease=1.0), Member(sessions, "b", lease=1.0)
    assert a.attempt()
    assert not b.attempt()  # a is silent from here on: it died
    time.sleep(1.1)  # the database's clock
    assert b.attempt() and b.calls == ["elected"]
    assert not a.attempt()  # a comes back: it is told, and stands by
    assert a.calls == ["elected", "deposed"]


def test_a_leader_that_cannot_renew_stands_by_when_its_own_lease_runs_out(
    sessions: sessionmaker[Session],
) -> None:
    a = Member(sessions, "a", lease=30.0)
    assert a.attempt()

    def unreachable() -> bool:
        raise ConnectionError("the database does not answer")

    a.leadership._try_hold = unreachable  # type: ignore[method-assign]
    a.clock.now += 29.0
    assert a.attempt()  # still within the lease it renewed last
    assert a.calls == ["elected"]
    a.clock.now += 1.5
    assert not a.attempt()
    assert a.calls == ["elected", "deposed"]


def test_two_coordinators_with_one_host_name_and_address_get_different_holders() -> None:
    """Two network namespaces of one host: the same host name and listen address, and
    still two holders (one lease for one of them only)."""
    assert holder_name("0.0.0.0:8470") != holder_name("0.0.0.0:8470")
    assert holder_name("0.0.0.0:8470").split("/")[1] == "0.0.0.0:8470"
