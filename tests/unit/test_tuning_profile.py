"""Tuning profiles: parsing, validation (every problem at once, each naming its
field) and the profiles shipped in config/tuning."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from reservoir.agent.tuning import (
    PROFILE_DIR,
    NicSettings,
    Profile,
    ProfileError,
    SysctlSetting,
    load_profile,
    parse_profile,
    resolve_profile,
)

GOOD = """
description = "a test profile"

[sysctl]
"net.ipv4.tcp_rmem" = [4096, 131072, 134217728]
"net.ipv4.tcp_congestion_control" = "bbr"
"net.ipv4.tcp_mtu_probing" = true
"net.core.netdev_max_backlog" = 5000
"net.core.default_qdisc" = { value = "fq", optional = true }

[nic]
interfaces = ["eth1", "eth2"]

[nic."*"]
mtu = 9000
txqueuelen = 10000

[nic."*".coalesce]
adaptive-rx = true
rx-usecs = 64

[nic.eth2]
mtu = 1500
"""


def parse(text: str) -> Profile:
    return parse_profile(tomllib.loads(text), name="t", source="t.toml")


def problems_of(text: str) -> list[str]:
    with pytest.raises(ProfileError) as info:
        parse(text)
    return info.value.problems


def test_good_profile_parses_into_written_values() -> None:
    p = parse_profile(tomllib.loads(GOOD), name="good", source="good.toml")
    assert p.name == "good" and p.description == "a test profile"
    assert p.sysctl == (
        SysctlSetting("net.ipv4.tcp_rmem", "4096 131072 134217728"),
        SysctlSetting("net.ipv4.tcp_congestion_control", "bbr"),
        SysctlSetting("net.ipv4.tcp_mtu_probing", "1"),
        SysctlSetting("net.core.netdev_max_backlog", "5000"),
        SysctlSetting("net.core.default_qdisc", "fq", optional=True),
    )
    assert p.sysctl[0].path == "net/ipv4/tcp_rmem"
    assert p.interfaces == ("eth1", "eth2")
    coalesce = {"adaptive-rx": "on", "rx-usecs": "64"}
    assert p.nic_targets() == [
        ("eth1", NicSettings(9000, 10000, coalesce)),
        ("eth2", NicSettings(1500, 10000, coalesce)),  # its own mtu over "*"
    ]


def test_command_line_interfaces_replace_the_profiles() -> None:
    p = parse_profile(tomllib.loads(GOOD), name="good")
    assert [name for name, _ in p.nic_targets(["veth0"])] == ["veth0"]
    assert p.nic_targets(["eth2"])[0][1].mtu == 1500


def test_without_any_interface_no_nic_settings_apply() -> None:
    p = parse('[nic."*"]\nmtu = 9000\n')
    assert p.nic_targets() == []
    assert p.nic_targets(["eth9"]) == [("eth9", NicSettings(mtu=9000))]


def test_unknown_section_is_named() -> None:
    assert problems_of('[tcp]\n"x" = 1\n') == [
        "tcp: unknown section or key (expected one of description, sysctl, nic)"
    ]


def test_unknown_nic_key_is_named() -> None:
    (problem,) = problems_of('[nic."*"]\nrx_usecs = 8\n')
    assert problem.startswith('nic."*".rx_usecs: unknown key')


def test_unknown_coalescing_option_is_named() -> None:
    (problem,) = problems_of("[nic.eth1.coalesce]\nrx-jiffies = 8\n")
    assert problem.startswith("nic.eth1.coalesce.rx-jiffies: not an ethtool coalescing option")


def test_bad_value_types_are_named() -> None:
    (problem,) = problems_of('[sysctl]\n"net.ipv4.tcp_rmem" = 1.5\n')
    assert problem.startswith('sysctl."net.ipv4.tcp_rmem": must be an integer, a string')
    assert problem.endswith("not a float")
    (problem,) = problems_of('[nic.eth1]\nmtu = "9000"\n')
    assert problem == "nic.eth1.mtu: must be an integer, not a string"
    (problem,) = problems_of("[nic.eth1.coalesce]\nadaptive-rx = 1\n")
    assert problem == "nic.eth1.coalesce.adaptive-rx: must be true or false, not an integer"


def test_out_of_range_mtu_is_named() -> None:
    (problem,) = problems_of('[nic."*"]\nmtu = 20\n')
    assert problem == 'nic."*".mtu: 20 is out of range (68..65535)'


def test_only_network_sysctls_are_accepted() -> None:
    (problem,) = problems_of('[sysctl]\n"vm.swappiness" = 10\n')
    assert problem.startswith('sysctl."vm.swappiness": not a network sysctl key')
    (problem,) = problems_of('[sysctl]\n"net/../../etc" = 1\n')
    assert problem.startswith('sysctl."net/../../etc": not a network sysctl key')


def test_root_qdisc_is_refused_with_the_reason() -> None:
    (problem,) = problems_of('[nic."*"]\nqdisc = "fq"\n')
    assert "kmod-pacing" in problem and "net.core.default_qdisc" in problem


def test_every_problem_is_reported_at_once() -> None:
    text = (
        "colour = 1\n"
        '[sysctl]\n"net.ipv4.tcp_rmem" = [1, "x"]\n'
        '"net.core.somaxconn" = { value = 1, sticky = true }\n'
        '[nic]\ninterfaces = "eth1"\n'
        "[nic.eth1]\ntxqueuelen = -1\n"
    )
    with pytest.raises(ProfileError) as info:
        parse(text)
    fields = [p.split(":")[0] for p in info.value.problems]
    assert fields == [
        "colour",
        'sysctl."net.ipv4.tcp_rmem"',
        'sysctl."net.core.somaxconn".sticky',
        "nic.interfaces",
        "nic.eth1.txqueuelen",
    ]
    message = str(info.value)
    assert message.startswith("t.toml: 5 problems:")
    assert all(p in message for p in info.value.problems)


def test_load_names_the_file_of_invalid_toml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[sysctl\n")
    with pytest.raises(ProfileError, match=r"bad\.toml: not valid TOML"):
        load_profile(str(bad))


def test_names_resolve_in_config_tuning_and_paths_as_given(tmp_path: Path) -> None:
    assert resolve_profile("lfn-1g") == PROFILE_DIR / "lfn-1g.toml"
    own = tmp_path / "mine.toml"
    own.write_text('[sysctl]\n"net.ipv4.tcp_mtu_probing" = 1\n')
    assert load_profile(str(own)).name == "mine"
    with pytest.raises(ProfileError, match=r"no profile of that name .*lfn-1g"):
        resolve_profile("lfn-99g")
    with pytest.raises(ProfileError, match="no such file"):
        resolve_profile(str(tmp_path / "absent.toml"))


SHIPPED = sorted(PROFILE_DIR.glob("*.toml"))


def test_the_lfn_profiles_are_shipped() -> None:
    assert {"lfn-1g", "lfn-10g", "stock"} <= {p.stem for p in SHIPPED}


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_profile_parses(path: Path) -> None:
    profile = load_profile(str(path))
    assert profile.description
    keys = {s.key for s in profile.sysctl}
    assert {"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_congestion_control"} <= keys


@pytest.mark.parametrize(("name", "gbit"), [("lfn-1g", 1), ("lfn-10g", 10)])
def test_lfn_buffers_hold_twice_the_bdp_at_350_ms(name: str, gbit: int) -> None:
    profile = load_profile(name)
    bdp = gbit * 1e9 / 8 * 0.350
    values = {s.key: s.value for s in profile.sysctl}
    for key in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"):
        top = int(values[key].split()[2])
        assert 2 * bdp <= top <= 4 * bdp, key


def test_lfn_profiles_keep_the_window_of_idle_connections_and_stock_does_not() -> None:
    def value(name: str) -> str:
        found = {s.key: s.value for s in load_profile(name).sysctl}
        return found["net.ipv4.tcp_slow_start_after_idle"]

    assert value("lfn-1g") == value("lfn-10g") == "0"
    assert value("stock") == "1"  # the kernel's default: the untuned baseline
