"""Each agent's tokens, derived from the coordinator's key and the agent's name, and what
``reservoir server agent-credentials`` prints of them."""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

import pytest

from reservoir.cli import main
from reservoir.server.app.core.agent_credentials import AgentCredentials
from reservoir.server.app.core.secret_key import load_or_create

TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")


def credentials(tmp_path: Path, name: str = "server.key") -> AgentCredentials:
    return AgentCredentials(load_or_create(tmp_path / name))


def test_every_agent_and_purpose_has_its_own_token(tmp_path: Path) -> None:
    creds = credentials(tmp_path)
    tokens = [
        creds.control_token("a"),
        creds.heartbeat_token("a"),
        creds.control_token("b"),
        creds.heartbeat_token("b"),
    ]
    assert len(set(tokens)) == 4
    assert all(TOKEN.fullmatch(t) for t in tokens)


def test_the_tokens_follow_the_key_not_the_moment(tmp_path: Path) -> None:
    same = credentials(tmp_path).control_token("a")
    assert credentials(tmp_path).control_token("a") == same
    assert credentials(tmp_path, "other.key").control_token("a") != same


def test_a_heartbeat_token_is_known_for_its_agent_only(tmp_path: Path) -> None:
    creds = credentials(tmp_path)
    token = creds.heartbeat_token("a")
    assert creds.is_heartbeat_token("a", token)
    assert not creds.is_heartbeat_token("b", token)
    assert not creds.is_heartbeat_token("a", creds.control_token("a"))
    assert creds.heartbeat_owner(token, [("b", 0), ("a", 0), ("c", 0)]) == "a"
    assert creds.heartbeat_owner(token, [("b", 0), ("c", 0)]) is None
    assert creds.heartbeat_owner(token, [("a", 1)]) is None  # another generation


def test_the_key_is_not_in_the_repr(tmp_path: Path) -> None:
    creds = credentials(tmp_path)
    assert creds.key.hex() not in repr(creds) and repr(creds.key) not in repr(creds)


def test_agent_credentials_prints_the_digest_line_and_the_heartbeat_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RESERVOIR_SERVER_SECRET_KEY_FILE", str(tmp_path / "server.key"))
    assert main(["server", "agent-credentials", "site-a-disk-1"]) == 0
    out = capsys.readouterr().out
    creds = credentials(tmp_path)
    lines = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("#")]
    (tokens_line,) = [ln for ln in lines if ln.startswith("tokens")]
    control = creds.control_token("site-a-disk-1").encode()
    assert tomllib.loads(tokens_line)["tokens"] == ["sha256:" + hashlib.sha256(control).hexdigest()]
    assert lines[-1] == creds.heartbeat_token("site-a-disk-1")
    assert creds.control_token("site-a-disk-1") not in out  # only its digest is shown
    assert "coordinator_token_file" in out


def test_agent_credentials_refuses_a_name_no_agent_may_have(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RESERVOIR_SERVER_SECRET_KEY_FILE", str(tmp_path / "server.key"))
    assert main(["server", "agent-credentials", "a b"]) == 2
    assert "not a valid agent name" in capsys.readouterr().err
    assert not (tmp_path / "server.key").exists()
