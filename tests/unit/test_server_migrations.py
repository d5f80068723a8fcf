"""The coordinator's migrations build exactly the schema of its tables, on SQLite and on
PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect, text

from reservoir.server.app import db
from reservoir.server.app.tables import Base


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on a fresh, empty database of each backend."""
    engine = db.make_engine(database_url)
    yield engine
    engine.dispose()


def _differences(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(compare_metadata(MigrationContext.configure(conn), Base.metadata))


def test_the_migrations_build_the_tables_as_declared(engine: Engine) -> None:
    db.upgrade(engine)
    assert _differences(engine) == []


def test_the_stream_limits_migration_goes_down_and_up_again(engine: Engine) -> None:
    db.upgrade(engine)
    command.downgrade(db.alembic_config(engine), "0008")
    assert not {"busy", "rwnd_limited", "sndbuf_limited"} & _columns(engine, "stream_samples")
    db.upgrade(engine)
    assert _differences(engine) == []


def _columns(engine: Engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


CLEAR = "the-agents-own-api-token-0123"


def test_the_credentials_migration_leaves_no_clear_agent_token_in_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "server.db"
    engine = db.make_engine(f"sqlite:///{path}")
    command.upgrade(db.alembic_config(engine), "0009")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO agents (id, name, control_url, api_token, capabilities, status,"
                " registered_at) VALUES ('1', 'a', 'http://h:1', :token, '[]', 'registered',"
                " '2026-11-01T00:00:00')"
            ),
            {"token": CLEAR},
        )
    db.upgrade(engine)
    engine.dispose()
    assert "api_token" not in _columns(db.make_engine(f"sqlite:///{path}"), "agents")
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("server.db*"))
    assert CLEAR.encode() not in raw
    assert b"http://h:1" in raw  # the agent itself is kept


def test_the_credentials_migration_goes_down_and_up_again(engine: Engine) -> None:
    db.upgrade(engine)
    command.downgrade(db.alembic_config(engine), "0009")
    assert "api_token" in _columns(engine, "agents")


def test_the_volume_identity_migration_goes_down_and_up_again(engine: Engine) -> None:
    db.upgrade(engine)
    assert "device_id" in _columns(engine, "agent_volumes")
    command.downgrade(db.alembic_config(engine), "0010")
    assert "device_id" not in _columns(engine, "agent_volumes")
    db.upgrade(engine)
    assert _differences(engine) == []


def test_transfers_from_before_the_verification_mode_verify_from_storage(engine: Engine) -> None:
    command.upgrade(db.alembic_config(engine), "0011")
    with engine.begin() as conn:
        for name in ("s", "d"):
            conn.execute(
                text(
                    "INSERT INTO volume_sets (id, name, stripe_unit, created_at)"
                    " VALUES (:n, :n, 1048576, '2026-11-01T00:00:00')"
                ),
                {"n": name},
            )
        conn.execute(
            text(
                "INSERT INTO transfers (id, source_set_id, dest_set_id, streams_per_pair,"
                " pacing_policy, pacing_margin, equalizer, verify, state, total_bytes,"
                " created_at, updated_at) VALUES ('t', 's', 'd', 8, 'per-nic', 0.05, TRUE, TRUE,"
                " 'completed', 4096, '2026-11-01T00:00:00', '2026-11-01T00:00:00')"
            )
        )
    db.upgrade(engine)
    with engine.connect() as conn:
        mode = conn.execute(text("SELECT verification FROM transfers")).scalar_one()
    assert mode == "storage"
    assert _differences(engine) == []


def test_the_verification_migration_goes_down_and_up_again(engine: Engine) -> None:
    db.upgrade(engine)
    command.downgrade(db.alembic_config(engine), "0011")
    assert "verification" not in _columns(engine, "transfers")
    db.upgrade(engine)
    assert _differences(engine) == []
