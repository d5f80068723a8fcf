"""The coordinator's migrations build exactly the schema of its tables."""

from __future__ import annotations

from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect

from reservoir.server import db
from reservoir.server.tables import Base


def _differences(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(compare_metadata(MigrationContext.configure(conn), Base.metadata))


def test_the_migrations_build_the_tables_as_declared() -> None:
    engine = db.make_engine("sqlite://")
    db.upgrade(engine)
    assert _differences(engine) == []


def test_the_stream_limits_migration_goes_down_and_up_again() -> None:
    engine = db.make_engine("sqlite://")
    db.upgrade(engine)
    command.downgrade(db.alembic_config(engine), "0008")
    assert not {"busy", "rwnd_limited", "sndbuf_limited"} & _columns(engine, "stream_samples")
    db.upgrade(engine)
    assert _differences(engine) == []


def _columns(engine: Engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}
