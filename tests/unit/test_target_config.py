"""Target configuration: TOML round trip, validation, atomic save, CLI editing."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from reservoir.agent.target import config as cfg
from reservoir.agent.target.server import TargetServer
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
                luns=[
                    cfg.Lun(0, "/srv/a.img"),
                    cfg.Lun(3, "/dev/loop3", True, True),
                    cfg.Lun(4, "/srv/b.img", bulk_writes="cached"),
                ],
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
    assert cfg.load_for_editing(path).require_target(IQN).luns == []
    assert _cli(path, "remove", IQN) == 0
    assert cfg.load_for_editing(path).targets == []


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


# ---------------------------------------------------------------- the file's schema

INITIATOR = "iqn.1994-05.com.example:h1"


def _write(tmp_path: Path, body: str) -> Path:
    """A target file with one portal and ``body`` after it; the LUN file exists."""
    (tmp_path / "a.img").write_bytes(bytes(4096))
    path = tmp_path / "t.toml"
    path.write_text(f'[server]\nportals = ["127.0.0.1:3260"]\n{body}')
    return path


def _target(tmp_path: Path, target_keys: str = "", lun_keys: str = "") -> str:
    return (
        f'[[target]]\niqn = "{IQN}"\n{target_keys}\n'
        f'[[target.lun]]\nid = 0\npath = "{tmp_path / "a.img"}"\n{lun_keys}\n'
    )


@pytest.mark.parametrize(
    ("target_keys", "lun_keys", "where"),
    [
        ("open = true", "read_onyl = true", "target[0].lun[0].read_onyl"),
        (f'alow = ["{INITIATOR}"]', "", "target[0].alow"),
        ('chapp = { user = "h1", secret = "0123456789abcdef" }', "", "target[0].chapp"),
    ],
)
def test_an_unknown_key_is_refused_with_its_path(
    tmp_path: Path, target_keys: str, lun_keys: str, where: str
) -> None:
    path = _write(tmp_path, _target(tmp_path, target_keys, lun_keys))
    with pytest.raises(cfg.ConfigError, match=r"unknown key") as caught:
        cfg.load(path)
    assert str(path) in str(caught.value) and where in str(caught.value)


def test_an_unknown_section_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, _target(tmp_path, "open = true") + "[bogus]\nx = 1\n")
    with pytest.raises(cfg.ConfigError, match=r"bogus: unknown key.*server, target"):
        cfg.load(path)


def test_a_misspelt_target_table_is_refused_not_served_empty(tmp_path: Path) -> None:
    path = _write(tmp_path, _target(tmp_path, "open = true").replace("[[target", "[[targets"))
    with pytest.raises(cfg.ConfigError, match=r"targets: unknown key"):
        cfg.load(path)


def test_direct_as_a_string_is_refused_not_taken_as_true(tmp_path: Path) -> None:
    path = _write(tmp_path, _target(tmp_path, "open = true", 'direct = "false"'))
    with pytest.raises(cfg.ConfigError, match=r"target\[0\]\.lun\[0\]\.direct: expected true or"):
        cfg.load(path)


def test_a_luns_bulk_writes_bypass_the_page_cache_unless_it_says_cached(tmp_path: Path) -> None:
    path = _write(tmp_path, _target(tmp_path, "open = true"))
    assert [lun.direct_io for lun in cfg.load(path).targets[0].luns] == ["bulk-writes"]
    cached = _write(tmp_path, _target(tmp_path, "open = true", 'bulk_writes = "cached"'))
    assert [lun.direct_io for lun in cfg.load(cached).targets[0].luns] == ["none"]
    direct = _write(tmp_path, _target(tmp_path, "open = true", "direct = true"))
    assert [lun.direct_io for lun in cfg.load(direct).targets[0].luns] == ["all"]


def test_an_unknown_bulk_writes_value_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = _write(tmp_path, _target(tmp_path, "open = true", 'bulk_writes = "fast"'))
    with pytest.raises(cfg.ConfigError, match=r"target\[0\]\.lun\[0\]\.bulk_writes: "):
        cfg.load(path)


def test_allow_as_a_string_is_refused_not_split_into_characters(tmp_path: Path) -> None:
    path = _write(tmp_path, _target(tmp_path, f'allow = "{INITIATOR}"'))
    with pytest.raises(cfg.ConfigError, match=r"target\[0\]\.allow: expected an array"):
        cfg.load(path)


def test_an_error_names_the_type_it_got_never_the_value(tmp_path: Path) -> None:
    path = _write(tmp_path, _target(tmp_path, "open = true\nchap = { user = 'h1', secret = 7 }"))
    with pytest.raises(cfg.ConfigError, match=r"chap\.secret: expected a string, got an integer"):
        cfg.load(path)


def test_a_file_without_a_target_is_refused_for_serving(tmp_path: Path) -> None:
    path = _write(tmp_path, "")
    with pytest.raises(cfg.ConfigError, match="no target"):
        cfg.load(path)


def test_a_target_without_acl_chap_or_open_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, _target(tmp_path))
    with pytest.raises(cfg.ConfigError, match=rf"{IQN}.*allow.*chap.*open = true"):
        cfg.load(path)


@pytest.mark.parametrize(
    "keys",
    [
        f'allow = ["{INITIATOR}"]',
        'chap = { user = "h1", secret = "0123456789abcdef" }',
        "open = true",
    ],
)
def test_an_acl_chap_or_open_is_enough_to_serve(tmp_path: Path, keys: str) -> None:
    assert cfg.load(_write(tmp_path, _target(tmp_path, keys))).require_target(IQN).luns


def test_open_with_an_acl_is_refused_as_contradictory(tmp_path: Path) -> None:
    path = _write(tmp_path, _target(tmp_path, f'open = true\nallow = ["{INITIATOR}"]'))
    with pytest.raises(cfg.ConfigError, match="open"):
        cfg.load(path)


def test_one_file_exported_read_write_by_two_targets_is_refused(tmp_path: Path) -> None:
    (tmp_path / "link.img").symlink_to(tmp_path / "a.img")
    second = _target(tmp_path, "open = true").replace(IQN, IQN + "b").replace("a.img", "link.img")
    path = _write(tmp_path, _target(tmp_path, "open = true") + second)
    with pytest.raises(cfg.ConfigError, match=r"read-write") as caught:
        cfg.load(path)
    assert "a.img" in str(caught.value) and "link.img" in str(caught.value)


def test_one_file_exported_read_write_twice_under_two_spellings_is_refused(tmp_path: Path) -> None:
    lun = tmp_path / "a.img"
    lun.write_bytes(bytes(4096))
    other = tmp_path / "sub" / ".." / "a.img"
    (tmp_path / "sub").mkdir()
    target = cfg.Target(IQN, luns=[cfg.Lun(0, str(lun)), cfg.Lun(1, str(other))], open=True)
    with pytest.raises(cfg.ConfigError, match="read-write"):
        cfg.validate(cfg.TargetConfig(portals=[("h", 1)], targets=[target]))


def test_one_file_exported_read_only_by_two_targets_is_accepted(tmp_path: Path) -> None:
    second = _target(tmp_path, "open = true", "read_only = true").replace(IQN, IQN + "b")
    path = _write(tmp_path, _target(tmp_path, "open = true", "read_only = true") + second)
    assert len(cfg.load(path).targets) == 2


def test_server_login_limits_have_defaults(tmp_path: Path) -> None:
    config = cfg.load(_write(tmp_path, _target(tmp_path, "open = true")))
    assert config.login_timeout == 15.0
    assert config.max_pending_logins == 256
    assert config.max_pending_logins_per_address == 64


def test_server_login_limits_are_read_and_round_trip(tmp_path: Path) -> None:
    path = _write(tmp_path, _target(tmp_path, "open = true"))
    limits = "login_timeout = 5\nmax_pending_logins = 10\nmax_pending_logins_per_address = 2\n"
    text = path.read_text().replace("[server]\n", f"[server]\n{limits}")
    path.write_text(text)
    config = cfg.load(path)
    assert (config.login_timeout, config.max_pending_logins) == (5.0, 10)
    assert config.max_pending_logins_per_address == 2
    cfg.save(config, path)
    assert cfg.load(path) == config


def test_the_served_target_keeps_to_the_files_login_limits(tmp_path: Path) -> None:
    path = _write(tmp_path, _target(tmp_path, "open = true"))
    limits = "login_timeout = 5\nmax_pending_logins = 10\nmax_pending_logins_per_address = 2\n"
    path.write_text(path.read_text().replace("[server]\n", f"[server]\n{limits}"))
    guard = TargetServer(cfg.load(path)).login_guard
    assert (guard.timeout, guard.max_pending, guard.max_per_address) == (5.0, 10, 2)


@pytest.mark.parametrize(
    ("line", "where"),
    [
        ("login_timeout = 0", "server.login_timeout"),
        ("max_pending_logins = 0", "server.max_pending_logins"),
        ("max_pending_logins_per_address = 0", "server.max_pending_logins_per_address"),
        ('login_timeout = "15"', "server.login_timeout"),
    ],
)
def test_server_login_limits_out_of_range_are_refused(
    tmp_path: Path, line: str, where: str
) -> None:
    path = _write(tmp_path, _target(tmp_path, "open = true"))
    path.write_text(path.read_text().replace("[server]\n", f"[server]\n{line}\n"))
    with pytest.raises(cfg.ConfigError, match=where.replace(".", r"\.")):
        cfg.load(path)


def test_portal_descriptions_say_when_every_address_is_served() -> None:
    assert "every IPv4 address" in cfg.describe_portal("0.0.0.0", 3260)
    assert "every IPv6" in cfg.describe_portal("::", 3260)
    assert cfg.describe_portal("127.0.0.1", 3260) == "127.0.0.1:3260"


def test_example_configuration_loads() -> None:
    example = Path(__file__).parents[2] / "config" / "target.example.toml"
    target = cfg.load(example).require_target("iqn.2026-11.org.reservoir:vol1")
    assert target.allow and target.chap and not target.open
