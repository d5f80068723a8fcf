"""The coordinator's SQLite file: created private, a warning for one open to others."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import text

from reservoir.server.app import db


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_database_is_0600_in_a_0700_folder_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "state" / "server.db"
    old = os.umask(0)
    try:
        engine = db.make_engine(f"sqlite:///{path}")
        db.upgrade(engine)
        engine.dispose()
    finally:
        os.umask(old)
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700


def test_an_existing_database_open_to_others_is_warned_about_and_left_as_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "server.db"
    path.touch()
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="reservoir.server"):
        db.make_engine(f"sqlite:///{path}").dispose()
    assert f"chmod 600 {path}" in caplog.text
    assert mode(path) == 0o644


def test_deleted_content_is_overwritten_in_the_file(tmp_path: Path) -> None:
    engine = db.make_engine(f"sqlite:///{tmp_path / 'server.db'}")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA secure_delete")).scalar() == 1
    engine.dispose()
