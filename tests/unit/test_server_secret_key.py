"""The coordinator's secret key: a file of its own, created private, refused when it is not."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from reservoir.cli import main
from reservoir.server.app.core.secret_key import KEY_BYTES, SecretKeyError, load_or_create

USER = "unit-user-token-0123456789abcdef"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_missing_key_file_is_created_0600_in_a_0700_folder(tmp_path: Path) -> None:
    path = tmp_path / "new" / "server.key"
    key = load_or_create(path)
    assert len(key) == KEY_BYTES
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700


def test_the_key_is_read_back_unchanged_and_differs_between_files(tmp_path: Path) -> None:
    first = load_or_create(tmp_path / "a.key")
    assert load_or_create(tmp_path / "a.key") == first
    assert load_or_create(tmp_path / "b.key") != first


def test_a_created_key_ignores_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        load_or_create(tmp_path / "server.key")
    finally:
        os.umask(old)
    assert mode(tmp_path / "server.key") == 0o600


@pytest.mark.parametrize("bits", [0o644, 0o640, 0o604, 0o620])
def test_a_key_file_open_to_others_is_refused(tmp_path: Path, bits: int) -> None:
    path = tmp_path / "server.key"
    load_or_create(path)
    path.chmod(bits)
    with pytest.raises(SecretKeyError, match="chmod 600") as info:
        load_or_create(path)
    assert str(path) in str(info.value)


def test_a_key_file_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "server.key"
    path.write_text("too short\n")
    path.chmod(0o600)
    with pytest.raises(SecretKeyError, match="64 hexadecimal digits"):
        load_or_create(path)


def test_an_unreadable_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "server.key"
    path.mkdir()  # a folder where the file should be: reading it fails, as with EACCES
    with pytest.raises(SecretKeyError, match=str(path)):
        load_or_create(path)


def config_with_key(tmp_path: Path, key: Path) -> Path:
    config = tmp_path / "server.toml"
    config.write_text(
        "[server]\n"
        f'database_url = "sqlite:///{tmp_path / "server.db"}"\n'
        f'user_tokens = ["{USER}"]\n'
        f'secret_key_file = "{key}"\n'
    )
    return config


def test_the_coordinator_refuses_to_start_with_a_world_readable_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "server.key"
    load_or_create(key)
    key.chmod(0o644)
    assert main(["server", "--config", str(config_with_key(tmp_path, key))]) == 2
    err = capsys.readouterr().err
    assert str(key) in err and "chmod 600" in err
    assert not (tmp_path / "server.db").exists()  # refused before anything is opened
