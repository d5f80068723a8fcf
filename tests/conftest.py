"""Fixtures every folder of the suite may use: the coordinator's databases.

The coordinator's tests run on both databases it supports: a SQLite file of their own,
and a fresh database on a real PostgreSQL server the suite starts once (Debian's
``postgresql`` package; ``reservoir.lab.postgres``). A test asks for ``database_url``
(one per test) or ``module_database_url`` (one per module, for modules that start a
coordinator once) and runs once per backend, named ``[sqlite]`` and ``[postgresql]``;
``engine`` and ``sessions`` are that database migrated to the latest revision.
"""

from __future__ import annotations

import gc
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from reservoir.server.app import db

BACKENDS = ["sqlite", "postgresql"]
_names = itertools.count()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """One PostgreSQL server for the session (a ``reservoir.lab.postgres.PostgresCluster``),
    in a temporary folder, stopped at the end."""
    lab = pytest.importorskip(
        "reservoir.lab.postgres", reason="psycopg is not installed (run make install)"
    )
    if lab.server_bin() is None:
        pytest.skip("no PostgreSQL server installed (Debian package postgresql; make install)")
    with lab.PostgresCluster() as cluster:
        yield cluster


def _database(request: pytest.FixtureRequest, folder: Path) -> Iterator[str]:
    """A fresh database of the backend ``request.param``: its SQLAlchemy URL."""
    if request.param == "sqlite":
        yield f"sqlite:///{folder / 'server.db'}"
        return
    cluster = request.getfixturevalue("postgres")
    name = f"t{os.getpid()}_{next(_names)}"
    url = cluster.create_database(name)
    try:
        yield url
    finally:
        if cluster.connections(name):
            _close_strays(name)
        cluster.drop_database(name)


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty coordinator database for one test, on each backend."""
    yield from _database(request, tmp_path)


@pytest.fixture(scope="module", params=BACKENDS)
def module_database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A fresh, empty coordinator database for one module, on each backend."""
    yield from _database(request, tmp_path_factory.mktemp("db"))


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on ``database_url`` migrated to the latest revision, disposed after."""
    engine = db.make_engine(database_url)
    db.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    """Sessions of :func:`engine`."""
    return db.make_sessions(engine)


def _close_strays(database: str) -> None:
    """Closes the connections to ``database`` a test left in an engine's pool after the
    engine was disposed (they would be closed by the server's DROP, then warned about
    when collected, in whichever test runs then)."""
    import psycopg  # noqa: PLC0415  # only where a PostgreSQL test ran

    gc.collect()
    for obj in gc.get_objects():
        if isinstance(obj, psycopg.Connection) and not obj.closed and obj.info.dbname == database:
            obj.close()
