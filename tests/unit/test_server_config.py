"""The coordinator's settings: insecure configurations refused with one clear line."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from reservoir.cli import build_parser
from reservoir.common import tokens as token_rule
from reservoir.server.app.core.config import (
    MIN_TOKEN_LENGTH,
    ServerSettings,
    SettingsError,
    load_settings,
    with_generated_tokens,
)

USER = "user-token-0123456789abcdef"
AGENT = "agent-token-0123456789abcdef"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("RESERVOIR_SERVER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "server.toml"
    path.write_text(body)
    return path


def test_production_refuses_to_start_without_tokens() -> None:
    with pytest.raises(SettingsError, match="user_tokens is empty") as info:
        load_settings()
    assert "RESERVOIR_SERVER_ENVIRONMENT=development" in str(info.value)


def test_production_refuses_short_tokens_without_showing_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESERVOIR_SERVER_USER_TOKENS", '["short-secret"]')
    with pytest.raises(SettingsError, match=f"{MIN_TOKEN_LENGTH} characters") as info:
        load_settings()
    assert "short-secret" not in str(info.value)


def test_shared_agent_tokens_are_refused_pointing_at_agent_credentials(tmp_path: Path) -> None:
    path = write(tmp_path, f'[server]\nuser_tokens = ["{USER}"]\nagent_tokens = ["{AGENT}"]\n')
    with pytest.raises(SettingsError, match="agent-credentials") as info:
        load_settings(path)
    assert "server.agent_tokens" in str(info.value) and AGENT not in str(info.value)


def test_shared_agent_tokens_in_the_environment_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESERVOIR_SERVER_AGENT_TOKENS", f'["{AGENT}"]')
    with pytest.raises(SettingsError, match=r"RESERVOIR_SERVER_AGENT_TOKENS .*agent-credentials"):
        load_settings(user_tokens=[USER])


def test_the_secret_key_lives_beside_the_sqlite_database_by_default(tmp_path: Path) -> None:
    default = load_settings(user_tokens=[USER])
    assert default.secret_key_path == tmp_path / "state" / "reservoir" / "server.key"
    beside = load_settings(user_tokens=[USER], database_url=f"sqlite:///{tmp_path / 'x.db'}")
    assert beside.secret_key_path == tmp_path / "server.key"
    given = load_settings(user_tokens=[USER], secret_key_file=tmp_path / "k")
    assert given.secret_key_path == tmp_path / "k"


def test_cors_open_to_everyone_is_refused_outside_development() -> None:
    with pytest.raises(SettingsError, match="cors_origins"):
        load_settings(user_tokens=[USER], cors_origins=["*"])


def test_defaults_are_loopback_sqlite_and_no_cors(tmp_path: Path) -> None:
    settings = load_settings(user_tokens=[USER])
    assert (settings.host, settings.port) == ("127.0.0.1", 8470)
    assert settings.database_url == f"sqlite:///{tmp_path / 'state' / 'reservoir' / 'server.db'}"
    assert settings.cors_origins == []


def test_hashed_tokens_are_accepted_and_only_digests_are_compared() -> None:
    settings = load_settings(user_tokens=[token_rule.hash_token(USER)])
    assert token_rule.matches(USER, settings.user_digests)
    assert not token_rule.matches(AGENT, settings.user_digests)
    assert not token_rule.matches(token_rule.hash_token(USER), settings.user_digests)


def test_command_line_beats_environment_beats_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        f'[server]\nlisten = "127.0.0.1:1"\ndatabase_url = "sqlite:///file.db"\n'
        f'user_tokens = ["{token_rule.hash_token(USER)}"]\n',
    )
    monkeypatch.setenv("RESERVOIR_SERVER_LISTEN", "127.0.0.1:2")
    settings = load_settings(path, listen=None, database_url="sqlite:///cli.db")
    assert settings.listen == "127.0.0.1:2"
    assert settings.database_url == "sqlite:///cli.db"
    assert load_settings(path, listen="127.0.0.1:3").listen == "127.0.0.1:3"


def test_config_file_without_a_server_table_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"no \[server\] table"):
        load_settings(write(tmp_path, "[agent]\n"))


def test_bad_listen_address_is_refused() -> None:
    with pytest.raises(SettingsError, match=r"server\.listen"):
        load_settings(listen="nowhere", user_tokens=[USER])


def test_development_generates_a_missing_user_token_once() -> None:
    settings = load_settings(environment="development")
    settings, made = with_generated_tokens(settings)
    assert set(made) == {"user"}
    assert len(made["user"]) >= MIN_TOKEN_LENGTH
    assert token_rule.matches(made["user"], settings.user_digests)
    again = load_settings(environment="development", user_tokens=[USER])
    assert with_generated_tokens(again) == (again, {})


def test_production_settings_get_no_generated_tokens() -> None:
    settings = ServerSettings(user_tokens=[USER])  # type: ignore[list-item]
    assert with_generated_tokens(settings) == (settings, {})


def test_cli_registers_the_server_command() -> None:
    args = build_parser().parse_args(
        ["server", "--db", "sqlite:///x.db", "--listen", "127.0.0.1:9", "--config", "s.toml"]
    )
    assert (args.db, args.listen, args.config) == ("sqlite:///x.db", "127.0.0.1:9", "s.toml")


def test_cli_refuses_insecure_start_with_a_clear_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = build_parser().parse_args(["server"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("reservoir server: ")
    assert "user_tokens is empty: set RESERVOIR_SERVER_USER_TOKENS" in err


def test_cli_hashes_a_token_from_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(USER + "\n"))
    args = build_parser().parse_args(["server", "--hash-token"])
    assert args.func(args) == 0
    assert capsys.readouterr().out.strip() == token_rule.hash_token(USER)


def test_a_file_must_give_a_number_the_environment_may_spell_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment holds only strings; a TOML file has types, and keeps them."""
    monkeypatch.setenv("RESERVOIR_SERVER_SCHEDULER_INTERVAL", "2")
    settings = load_settings(environment="development")
    assert settings.scheduler_interval == 2.0
    path = write(tmp_path, '[server]\nscheduler_interval = "2"\n')
    with pytest.raises(SettingsError, match=r"server\.scheduler_interval: .*number, got a string"):
        load_settings(path, environment="development")


def test_a_bad_value_in_the_file_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, f'[server]\nlisten = "nowhere"\nuser_tokens = ["{USER}"]\n')
    with pytest.raises(SettingsError) as info:
        load_settings(path)
    message = str(info.value)
    assert message.startswith(f"{path}: server.listen: ") and "HOST:PORT" in message
    assert USER not in message
