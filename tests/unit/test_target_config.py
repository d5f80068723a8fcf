"""Target configuration: TOML round trip, validation, atomic save, CLI editing."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from reservoir.agent.target import config as cfg
from reservoir.cli import main

IQN = "iqn.2026-11.org.reservoir:vol1"


def _cli(path: Path, *args: str) -> int:
    return main(["target", args[0], "--config", str(path), *args[1:]])


def test_portal_parsing_accepts_ipv4_ipv6_and_default_port() -> None:
    assert cfg.parse_portal("10.0.0.1:3261") == ("10.0.0.1", 3261)
    assert cfg.parse_portal("10.0.0.1") == ("10.0.0.1", 3260)
    assert cfg.parse_portal("[fd00::1]:3262") == ("fd00::1", 3262)


@pytest.mark.parametrize("bad", ["host:0", "host:99999", "host:x", "[fd00::1", ":3260"])
def test_portal_parsing_refuses_bad_portals(bad: str) -> None:
    with pytest.raises(cfg.ConfigError):
        cfg.parse_portal(bad)


def test_save_then_load_returns_the_same_configuration(tmp_path: Path) -> None:
    config = cfg.TargetConfig(
        portals=[("127.0.0.1", 3260), ("fd00::1", 3261)],
        targets=[
            cfg.Target(
                IQN,
                alias="vol1",
                luns=[cfg.Lun(0, "/srv/a.img"), cfg.Lun(3, "/dev/loop3", True, True)],
                allow=["iqn.1994-05.com.example:h1"],
                chap=cfg.Chap("h1", "0123456789abcdef"),
                mutual_chap=cfg.Chap("vol1", "fedcba9876543210"),
            )
        ],
    )
    path = tmp_path / "t.toml"
    cfg.save(config, path)
    assert cfg.load(path) == config


def test_saved_file_is_private_and_no_temp_file_is_left(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    cfg.save(cfg.TargetConfig(portals=[("127.0.0.1", 3260)]), path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.listdir(tmp_path) == ["t.toml"]


def test_short_chap_secret_is_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(
        f'[server]\nportals = ["127.0.0.1:3260"]\n[[target]]\niqn = "{IQN}"\n'
        'chap = { user = "u", secret = "short" }\n'
    )
    with pytest.raises(cfg.ConfigError, match="chap"):
        cfg.load(path)


def test_duplicate_lun_ids_are_refused() -> None:
    target = cfg.Target(IQN, luns=[cfg.Lun(1, "/a"), cfg.Lun(1, "/b")])
    with pytest.raises(cfg.ConfigError, match="duplicate LUN"):
        cfg.validate(cfg.TargetConfig(portals=[("h", 1)], targets=[target]))


def test_bad_target_name_is_refused() -> None:
    with pytest.raises(cfg.ConfigError, match="not an iqn"):
        cfg.validate(cfg.TargetConfig(portals=[("h", 1)], targets=[cfg.Target("vol1")]))


def test_malformed_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text("[server\n")
    with pytest.raises(cfg.ConfigError, match="not valid TOML"):
        cfg.load(path)


def test_cli_builds_a_configuration_step_by_step(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    lun = tmp_path / "disk.img"
    lun.write_bytes(bytes(4096))
    assert _cli(path, "add", IQN, "--alias", "vol1") == 0
    assert _cli(path, "portal", "add", "127.0.0.1:3261") == 0
    assert _cli(path, "lun", "add", IQN, str(lun)) == 0
    assert _cli(path, "acl", "add", IQN, "iqn.1994-05.com.example:h1") == 0
    assert _cli(path, "chap", "set", IQN, "--user-secret", "h1:0123456789abcdef") == 0
    config = cfg.load(path)
    target = config.require_target(IQN)
    assert ("127.0.0.1", 3261) in config.portals
    assert [(x.id, x.path) for x in target.luns] == [(0, str(lun.resolve()))]
    assert target.allow == ["iqn.1994-05.com.example:h1"]
    assert target.chap == cfg.Chap("h1", "0123456789abcdef")


def test_cli_removes_lun_acl_and_target(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    lun = tmp_path / "disk.img"
    lun.write_bytes(bytes(4096))
    _cli(path, "add", IQN)
    _cli(path, "lun", "add", IQN, str(lun))
    _cli(path, "acl", "add", IQN, "iqn.1994-05.com.example:h1")
    assert _cli(path, "lun", "remove", IQN, "0") == 0
    assert _cli(path, "acl", "remove", IQN, "iqn.1994-05.com.example:h1") == 0
    assert cfg.load(path).require_target(IQN).luns == []
    assert _cli(path, "remove", IQN) == 0
    assert cfg.load(path).targets == []


def test_cli_refuses_a_missing_backing_file_and_leaves_the_file_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    _cli(path, "add", IQN)
    before = path.read_bytes()
    assert _cli(path, "lun", "add", IQN, str(tmp_path / "nope.img")) == 2
    assert path.read_bytes() == before


def test_cli_refuses_a_short_secret_and_leaves_the_file_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    _cli(path, "add", IQN)
    before = path.read_bytes()
    assert _cli(path, "chap", "set", IQN, "--user-secret", "h1:short") == 2
    assert path.read_bytes() == before


def test_cli_show_masks_secrets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.toml"
    _cli(path, "add", IQN)
    _cli(path, "chap", "set", IQN, "--user-secret", "h1:0123456789abcdef")
    capsys.readouterr()
    assert _cli(path, "show") == 0
    out = capsys.readouterr().out
    assert "h1:***" in out and "0123456789abcdef" not in out
