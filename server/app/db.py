"""The database: engine, sessions, and the Alembic upgrade run at start.

Any SQLAlchemy URL works (``sqlite:///path`` by default, ``postgresql+psycopg://...``
in production). SQLite gets foreign keys switched on and may be used across threads
(FastAPI runs the synchronous routes in a thread pool, one session per request).

A SQLite file the coordinator creates is private: its folder is made 0700 and the
file 0600 before SQLite opens it (SQLite gives its journal and WAL files the database
file's mode). An existing file that group or others may read is left as it is, with a
warning at start. ``secure_delete`` is on, so deleted rows and dropped columns are
overwritten in the file, not left in its free pages.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

__all__ = ["MIGRATIONS", "alembic_config", "make_engine", "make_sessions", "upgrade"]

MIGRATIONS = Path(__file__).resolve().parent / "migrations"

log = logging.getLogger("reservoir.server")


def make_engine(url: str) -> Engine:
    """An engine for ``url``; creates a SQLite file (and its folder) private."""
    parsed = make_url(url)
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        kwargs["connect_args"] = {"check_same_thread": False}
        if parsed.database and parsed.database != ":memory:":
            _private_file(Path(parsed.database))
    engine = create_engine(parsed, **kwargs)
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _private_file(path: Path) -> None:
    """``path`` created empty with mode 0600 (its folder 0700) if missing; a warning if
    it exists and group or others may read it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o044:
            log.warning(
                "the database %s may be read by group or others (mode %04o): chmod 600 %s",
                path,
                mode,
                path,
            )
        return
    os.fchmod(fd, 0o600)  # whatever the umask
    os.close(fd)


def _sqlite_pragmas(dbapi_connection: Any, connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA secure_delete=ON")
    cursor.close()


def make_sessions(engine: Engine, info: dict[str, Any] | None = None) -> sessionmaker[Session]:
    """Sessions of ``engine``; ``info`` is every session's ``info`` (what the
    coordinator's settings tell code that has only a session: ``webhooks.URLS_KEY``)."""
    return sessionmaker(engine, expire_on_commit=False, info=info)


def alembic_config(engine: Engine | None = None) -> Config:
    """Alembic's configuration for our ``migrations/``, bound to ``engine`` if given."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if engine is not None:
        config.attributes["engine"] = engine
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrates the database of ``engine`` to ``revision`` (an empty one is created)."""
    command.upgrade(alembic_config(engine), revision)
