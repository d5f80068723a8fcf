"""``reservoir target ...``: edits that keep the administrator's file, access that is
said explicitly, CHAP secrets from a file or the environment."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import stat
from pathlib import Path

import pytest

from reservoir.agent.target import cli as target_cli
from reservoir.agent.target import config as cfg
from reservoir.agent.target.server import TargetServer
from reservoir.cli import build_parser, main

IQN = "iqn.2026-11.org.reservoir:vol1"
INITIATOR = "iqn.1994-05.com.example:h1"
SECRET = "0123456789abcdef"
MUTUAL_SECRET = "fedcba9876543210"


def _cli(path: Path, *args: str) -> int:
    return main(["target", args[0], "--config", str(path), *args[1:]])


def _quick(*args: str) -> argparse.Namespace:
    return build_parser().parse_args(["target", "serve", "--iqn", IQN, *args])


@pytest.fixture
def lun(tmp_path: Path) -> Path:
    path = tmp_path / "disk.img"
    path.write_bytes(bytes(4096))
    return path


def _secret_file(tmp_path: Path, secret: str, mode: int = 0o600) -> Path:
    path = tmp_path / "secret"
    path.write_text(secret + "\n")
    path.chmod(mode)
    return path


# ---------------------------------------------------------------- editing a file


def _commented_file(tmp_path: Path, lun: Path) -> Path:
    path = tmp_path / "t.toml"
    path.write_text(
        "# Targets of the storage node; ask the storage team before editing.\n"
        "[server]\n"
        'portals = ["127.0.0.1:3260"]  # the storage network only\n'
        "\n"
        "[[target]]\n"
        f'iqn = "{IQN}"\n'
        f'allow = ["{INITIATOR}"]  # the database host\n'
        "\n"
        "    # the volume of the database\n"
        "    [[target.lun]]\n"
        "    id = 0\n"
        f'    path = "{lun}"\n'
    )
    return path


def test_cli_edits_keep_the_administrators_comments_and_layout(tmp_path: Path, lun: Path) -> None:
    path = _commented_file(tmp_path, lun)
    before = path.read_text()
    assert _cli(path, "acl", "add", IQN, "iqn.1994-05.com.example:h2") == 0
    assert _cli(path, "portal", "add", "127.0.0.1:3261") == 0
    assert _cli(path, "chap", "set", IQN, "--user-secret", f"h1:{SECRET}") == 0
    text = path.read_text()
    for line in before.splitlines():
        if "#" in line:
            assert line[line.index("#") :] in text  # the comment, on the line it was on
        elif line.startswith("    "):
            assert line in text  # the indentation
    config = cfg.load(path)
    assert config.require_target(IQN).allow == [INITIATOR, "iqn.1994-05.com.example:h2"]
    assert config.portals == [("127.0.0.1", 3260), ("127.0.0.1", 3261)]
    assert config.require_target(IQN).chap == cfg.Chap("h1", SECRET)


def test_cli_edit_of_a_file_keeps_it_private(tmp_path: Path, lun: Path) -> None:
    path = _commented_file(tmp_path, lun)
    path.chmod(0o644)
    assert _cli(path, "acl", "add", IQN, "iqn.1994-05.com.example:h2") == 0
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["disk.img", "t.toml"]


def test_cli_refuses_to_edit_a_file_it_cannot_fully_read(
    tmp_path: Path, lun: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _commented_file(tmp_path, lun)
    path.write_text(path.read_text().replace("allow =", "alow ="))
    before = path.read_bytes()
    assert _cli(path, "acl", "add", IQN, "iqn.1994-05.com.example:h2") == 2
    assert path.read_bytes() == before
    assert "target[0].alow" in capsys.readouterr().err


def test_cli_add_without_a_portal_says_it_serves_every_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(tmp_path / "t.toml", "add", IQN) == 0
    out = capsys.readouterr().out
    assert "0.0.0.0:3260" in out and "every IPv4 address" in out


def test_cli_add_says_a_new_target_admits_no_one_yet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(tmp_path / "t.toml", "add", IQN) == 0
    assert "--open" in capsys.readouterr().out


def test_cli_add_open_makes_an_explicitly_open_target(tmp_path: Path, lun: Path) -> None:
    path = tmp_path / "t.toml"
    assert _cli(path, "add", IQN, "--open") == 0
    assert _cli(path, "lun", "add", IQN, str(lun)) == 0
    assert _cli(path, "portal", "add", "127.0.0.1") == 0
    assert "open = true" in path.read_text()
    assert cfg.load(path).require_target(IQN).open


def test_cli_open_clear_closes_a_target(tmp_path: Path, lun: Path) -> None:
    path = tmp_path / "t.toml"
    _cli(path, "add", IQN, "--open")
    _cli(path, "lun", "add", IQN, str(lun))
    _cli(path, "portal", "add", "127.0.0.1")
    assert _cli(path, "open", "clear", IQN) == 0
    with pytest.raises(cfg.ConfigError, match="open = true"):
        cfg.load(path)


def test_cli_refuses_a_second_read_write_export_of_one_file(
    tmp_path: Path, lun: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.toml"
    _cli(path, "add", IQN, "--open")
    _cli(path, "add", IQN + "b", "--open")
    assert _cli(path, "lun", "add", IQN, str(lun)) == 0
    before = path.read_bytes()
    assert _cli(path, "lun", "add", IQN + "b", str(lun)) == 2
    assert path.read_bytes() == before
    assert "read-write" in capsys.readouterr().err


# ---------------------------------------------------------------- access, said explicitly


def test_quick_target_without_acl_chap_or_open_is_refused(lun: Path) -> None:
    with pytest.raises(cfg.ConfigError, match="--open"):
        target_cli.quick_config(_quick("--lun", str(lun), "--portal", "127.0.0.1:3260"))


def test_quick_target_with_open_admits_everyone_explicitly(lun: Path) -> None:
    config = target_cli.quick_config(_quick("--lun", str(lun), "--open", "--portal", "127.0.0.1"))
    assert config.require_target(IQN).open


def test_quick_target_writes_bulk_data_past_the_page_cache_unless_told(lun: Path) -> None:
    quick = target_cli.quick_config(_quick("--lun", str(lun), "--open"))
    assert quick.require_target(IQN).luns[0].direct_io == "bulk-writes"
    cached = target_cli.quick_config(_quick("--lun", str(lun), "--open", "--cached-bulk-writes"))
    assert cached.require_target(IQN).luns[0].direct_io == "none"
    direct = target_cli.quick_config(_quick("--lun", str(lun), "--open", "--direct"))
    assert direct.require_target(IQN).luns[0].direct_io == "all"


def test_quick_target_without_a_portal_says_it_serves_every_address(
    lun: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "reservoir.target"):
        config = target_cli.quick_config(_quick("--lun", str(lun), "--open"))
    assert config.portals == [("0.0.0.0", 3260)]
    assert "0.0.0.0:3260 (every IPv4 address" in caplog.text


def _start_and_stop(config: cfg.TargetConfig) -> None:
    async def run() -> None:
        server = TargetServer(config, nop_interval=0)
        await server.start()
        await server.stop(grace=0)

    asyncio.run(run())


def test_an_open_target_logs_a_warning_naming_it(
    lun: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = cfg.Target(IQN, luns=[cfg.Lun(0, str(lun))], open=True)
    config = cfg.TargetConfig(portals=[("127.0.0.1", 0)], targets=[target])
    with caplog.at_level(logging.INFO, "reservoir.target"):
        _start_and_stop(config)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(IQN in m and "every initiator" in m for m in warnings)


def test_a_target_with_an_acl_logs_no_open_warning(
    lun: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = cfg.Target(IQN, luns=[cfg.Lun(0, str(lun))], allow=[INITIATOR])
    config = cfg.TargetConfig(portals=[("127.0.0.1", 0)], targets=[target])
    with caplog.at_level(logging.INFO, "reservoir.target"):
        _start_and_stop(config)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert INITIATOR in caplog.text


def test_a_server_refuses_to_start_a_target_that_admits_no_one(lun: Path) -> None:
    config = cfg.TargetConfig(
        portals=[("127.0.0.1", 0)], targets=[cfg.Target(IQN, luns=[cfg.Lun(0, str(lun))])]
    )
    with pytest.raises(cfg.ConfigError, match="open = true"):
        _start_and_stop(config)


# ---------------------------------------------------------------- secrets off the command line


def test_quick_target_reads_the_chap_secret_from_a_file(tmp_path: Path, lun: Path) -> None:
    secret = _secret_file(tmp_path, SECRET)
    args = _quick("--lun", str(lun), "--chap", "h1", "--chap-secret-file", str(secret))
    assert target_cli.quick_config(args).require_target(IQN).chap == cfg.Chap("h1", SECRET)


def test_quick_target_reads_the_chap_secret_from_the_environment(
    lun: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TARGET_CHAP_SECRET", SECRET)
    monkeypatch.setenv("TARGET_MUTUAL_SECRET", MUTUAL_SECRET)
    args = _quick(
        *("--lun", str(lun), "--chap", "h1", "--chap-secret-env", "TARGET_CHAP_SECRET"),
        *("--mutual-chap", "vol1", "--mutual-chap-secret-env", "TARGET_MUTUAL_SECRET"),
    )
    target = target_cli.quick_config(args).require_target(IQN)
    assert target.chap == cfg.Chap("h1", SECRET)
    assert target.mutual_chap == cfg.Chap("vol1", MUTUAL_SECRET)


def test_quick_target_reads_the_mutual_chap_secret_from_a_file(tmp_path: Path, lun: Path) -> None:
    secret = _secret_file(tmp_path, MUTUAL_SECRET)
    args = _quick(
        *("--lun", str(lun), "--chap", f"h1:{SECRET}", "--mutual-chap", "vol1"),
        *("--mutual-chap-secret-file", str(secret)),
    )
    assert target_cli.quick_config(args).require_target(IQN).mutual_chap == cfg.Chap(
        "vol1", MUTUAL_SECRET
    )


def test_a_secret_file_others_can_read_is_refused(tmp_path: Path, lun: Path) -> None:
    secret = _secret_file(tmp_path, SECRET, 0o644)
    args = _quick("--lun", str(lun), "--chap", "h1", "--chap-secret-file", str(secret))
    with pytest.raises(cfg.ConfigError, match="chmod 600"):
        target_cli.quick_config(args)


def test_an_unset_secret_variable_is_refused(lun: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_SECRET", raising=False)
    args = _quick("--lun", str(lun), "--chap", "h1", "--chap-secret-env", "NO_SUCH_SECRET")
    with pytest.raises(cfg.ConfigError, match="NO_SUCH_SECRET"):
        target_cli.quick_config(args)


def test_cli_chap_set_reads_the_secrets_from_a_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.toml"
    _cli(path, "add", IQN)
    secret = _secret_file(tmp_path, SECRET)
    monkeypatch.setenv("TARGET_MUTUAL_SECRET", MUTUAL_SECRET)
    argv = ["chap", "set", IQN, "--chap", "h1", "--chap-secret-file", str(secret)]
    argv += ["--mutual-chap", "vol1", "--mutual-chap-secret-env", "TARGET_MUTUAL_SECRET"]
    assert _cli(path, *argv) == 0
    target = cfg.load_for_editing(path).require_target(IQN)
    assert target.chap == cfg.Chap("h1", SECRET)
    assert target.mutual_chap == cfg.Chap("vol1", MUTUAL_SECRET)


def test_serve_with_a_file_refuses_quick_target_options_instead_of_ignoring_them(
    tmp_path: Path, lun: Path
) -> None:
    path = _commented_file(tmp_path, lun)
    args = build_parser().parse_args(["target", "serve", "--config", str(path), "--open"])
    with pytest.raises(cfg.ConfigError, match="--open is for a quick target"):
        target_cli.file_config(args)
