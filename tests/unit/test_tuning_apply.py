"""Applying and reverting tuning profiles against a fake /proc/sys tree and fake
links: what changes, what is refused and why, and what the state file keeps."""

from __future__ import annotations

import argparse
import io
import json
import os
import tomllib
from pathlib import Path

import pytest

from reservoir.agent.tuning import (
    CHANGED,
    REFUSED,
    SKIPPED,
    UNCHANGED,
    WOULD_CHANGE,
    Ethtool,
    Host,
    HostRefusedError,
    LinkState,
    Outcome,
    Profile,
    Report,
    Sysctl,
    apply_profile,
    format_table,
    parse_coalesce,
    parse_profile,
    read_state,
    revert,
    state_path,
)
from reservoir.agent.tuning import cli as tuning_cli
from reservoir.agent.tuning._persist import other_netns
from reservoir.agent.tuning.cli import add_tune_arguments, run_tune
from reservoir.cli import build_parser

NETNS = 4026531999

TREE = {
    "net/ipv4/tcp_rmem": "4096\t131072\t6291456",
    "net/ipv4/tcp_wmem": "4096\t16384\t4194304",
    "net/ipv4/tcp_congestion_control": "cubic",
    "net/ipv4/tcp_available_congestion_control": "reno cubic bbr",
    "net/ipv4/tcp_mtu_probing": "0",
    "net/ipv4/tcp_no_metrics_save": "0",
    "net/core/rmem_max": "4194304",
}
READ_ONLY = {"net/core/rmem_max"}


class FakeLinks:
    def __init__(self) -> None:
        self.links = {"veth0": LinkState(7, 1500, 1000)}
        self.max_mtu = 65535

    def lookup(self, ifname: str) -> LinkState | None:
        return self.links.get(ifname)

    def set(self, ifname: str, *, mtu: int | None = None, txqueuelen: int | None = None) -> None:
        link = self.links.get(ifname)
        if link is None:
            raise HostRefusedError(f"ENODEV: no network device {ifname} here")
        if mtu is not None and mtu > self.max_mtu:
            raise HostRefusedError("EINVAL: Invalid argument")
        self.links[ifname] = LinkState(
            link.index,
            link.mtu if mtu is None else mtu,
            link.txqueuelen if txqueuelen is None else txqueuelen,
        )

    def close(self) -> None:
        pass


class FakeCoalescer:
    def __init__(self) -> None:
        self.options = {"veth0": {"adaptive-rx": "off", "rx-usecs": "8"}}

    def read(self, ifname: str) -> dict[str, str]:
        return dict(self.options[ifname])

    def write(self, ifname: str, option: str, value: str) -> None:
        self.options[ifname][option] = value


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "proc-sys"
    for rel, value in TREE.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")
        if rel in READ_ONLY:
            path.chmod(0o444)
    return root


@pytest.fixture
def host(root: Path) -> Host:
    return Host(Sysctl(root), FakeLinks(), FakeCoalescer(), NETNS)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


def profile(text: str, name: str = "p") -> Profile:
    return parse_profile(tomllib.loads(text), name=name, source=f"{name}.toml")


def value(root: Path, key: str) -> str:
    return " ".join((root / key.replace(".", "/")).read_text().split())


def by_setting(report: Report) -> dict[str, Outcome]:
    return {o.setting: o for o in report.outcomes}


LFN = profile(
    """
[sysctl]
"net.ipv4.tcp_rmem" = [4096, 131072, 134217728]
"net.ipv4.tcp_congestion_control" = "bbr"
"net.ipv4.tcp_no_metrics_save" = 0
"net.core.rmem_max" = 134217728
""",
    "lfn",
)


def test_apply_changes_reports_and_records_originals(
    root: Path, host: Host, state_dir: Path
) -> None:
    report = apply_profile(LFN, host, state_dir=state_dir)
    out = by_setting(report)
    assert out["net.ipv4.tcp_rmem"] == Outcome(
        "sysctl", "net.ipv4.tcp_rmem", CHANGED, "4096 131072 6291456", "4096 131072 134217728"
    )
    assert out["net.ipv4.tcp_congestion_control"].result == CHANGED
    assert out["net.ipv4.tcp_no_metrics_save"].result == UNCHANGED
    assert value(root, "net.ipv4.tcp_rmem") == "4096 131072 134217728"
    assert value(root, "net.ipv4.tcp_congestion_control") == "bbr"

    saved = read_state(state_path(state_dir, NETNS))
    assert saved is not None and saved.profiles == ["lfn"]
    originals = {e.name: e.value for e in saved.entries.values()}
    # only what changed is recorded: not the unchanged nor the refused setting
    assert originals == {
        "net.ipv4.tcp_rmem": "4096 131072 6291456",
        "net.ipv4.tcp_congestion_control": "cubic",
    }
    assert state_path(state_dir, NETNS).stat().st_mode & 0o777 == 0o600


def test_read_only_setting_is_refused_and_the_rest_applied(
    root: Path, host: Host, state_dir: Path
) -> None:
    report = apply_profile(LFN, host, state_dir=state_dir)
    refused = by_setting(report)["net.core.rmem_max"]
    assert refused.result == REFUSED
    assert refused.reason is not None and refused.reason.startswith("EACCES: read-only")
    assert refused.before == refused.after == "4194304"
    assert value(root, "net.core.rmem_max") == "4194304"
    assert report.exit_code == 3
    assert [o.setting for o in report.refused] == ["net.core.rmem_max"]


def test_write_refused_by_the_kernel_is_reported_and_not_recorded(
    root: Path, state_dir: Path
) -> None:
    class Picky(Sysctl):
        def write(self, key: str, value: str) -> None:
            if key == "net.ipv4.tcp_wmem":
                raise HostRefusedError("EINVAL: Invalid argument (the kernel rejected it)")
            super().write(key, value)

    host = Host(Picky(root), FakeLinks(), FakeCoalescer(), NETNS)
    p = profile('[sysctl]\n"net.ipv4.tcp_wmem" = [1, 2, 3]\n"net.ipv4.tcp_mtu_probing" = 1\n')
    report = apply_profile(p, host, state_dir=state_dir)
    out = by_setting(report)
    assert out["net.ipv4.tcp_wmem"].result == REFUSED
    assert out["net.ipv4.tcp_wmem"].reason == "EINVAL: Invalid argument (the kernel rejected it)"
    assert out["net.ipv4.tcp_mtu_probing"].result == CHANGED
    saved = read_state(state_path(state_dir, NETNS))
    assert saved is not None
    assert [e.name for e in saved.entries.values()] == ["net.ipv4.tcp_mtu_probing"]


def test_optional_value_the_kernel_does_not_know_is_skipped(root: Path, state_dir: Path) -> None:
    class NoFq(Sysctl):
        def write(self, key: str, value: str) -> None:
            if value == "fq":  # what writing an unbuilt qdisc to default_qdisc gives
                raise HostRefusedError("ENOENT: No such file or directory (...)", absent=True)
            super().write(key, value)

    (root / "net/core/default_qdisc").write_text("pfifo_fast\n")
    host = Host(NoFq(root), FakeLinks(), FakeCoalescer(), NETNS)
    optional = profile('[sysctl]\n"net.core.default_qdisc" = { value = "fq", optional = true }')
    report = apply_profile(optional, host, state_dir=state_dir)
    assert [(o.result, o.after) for o in report.outcomes] == [(SKIPPED, "pfifo_fast")]
    assert report.exit_code == 0
    assert not state_path(state_dir, NETNS).exists()  # nothing to restore
    required = profile('[sysctl]\n"net.core.default_qdisc" = "fq"')
    assert apply_profile(required, host, state_dir=state_dir).exit_code == 3


def test_missing_congestion_control_is_refused_with_the_available_list(
    root: Path, host: Host, state_dir: Path
) -> None:
    p = profile('[sysctl]\n"net.ipv4.tcp_congestion_control" = "htcp"\n')
    report = apply_profile(p, host, state_dir=state_dir)
    (o,) = report.outcomes
    assert o.result == REFUSED
    assert o.reason == (
        "the kernel has no congestion control 'htcp' "
        "(net.ipv4.tcp_available_congestion_control: reno cubic bbr)"
    )
    assert value(root, "net.ipv4.tcp_congestion_control") == "cubic"
    assert report.exit_code == 3


def test_absent_setting_is_refused_unless_optional(host: Host, state_dir: Path) -> None:
    p = profile(
        '[sysctl]\n"net.core.netdev_max_backlog" = 5000\n'
        '"net.core.default_qdisc" = { value = "fq", optional = true }\n'
    )
    out = by_setting(apply_profile(p, host, state_dir=state_dir))
    assert out["net.core.netdev_max_backlog"].result == REFUSED
    assert (out["net.core.netdev_max_backlog"].reason or "").startswith("ENOENT")
    assert out["net.core.default_qdisc"].result == SKIPPED
    only_optional = profile(
        '[sysctl]\n"net.core.default_qdisc" = { value = "fq", optional = true }'
    )
    assert apply_profile(only_optional, host, state_dir=state_dir).exit_code == 0


def test_second_apply_keeps_the_original_values(root: Path, host: Host, state_dir: Path) -> None:
    apply_profile(LFN, host, state_dir=state_dir)
    bigger = profile(
        '[sysctl]\n"net.ipv4.tcp_rmem" = [4096, 131072, 1073741824]\n'
        '"net.ipv4.tcp_mtu_probing" = 1\n',
        "bigger",
    )
    report = apply_profile(bigger, host, state_dir=state_dir)
    assert by_setting(report)["net.ipv4.tcp_rmem"].before == "4096 131072 134217728"
    saved = read_state(state_path(state_dir, NETNS))
    assert saved is not None and saved.profiles == ["lfn", "bigger"]
    originals = {e.name: e.value for e in saved.entries.values()}
    assert originals == {
        "net.ipv4.tcp_rmem": "4096 131072 6291456",  # from before the first profile
        "net.ipv4.tcp_congestion_control": "cubic",
        "net.ipv4.tcp_mtu_probing": "0",
    }


def test_revert_restores_exactly_what_was_there(root: Path, host: Host, state_dir: Path) -> None:
    before = {rel: (root / rel).read_text() for rel in TREE}
    apply_profile(LFN, host, state_dir=state_dir)
    apply_profile(
        profile('[sysctl]\n"net.ipv4.tcp_rmem" = [1, 2, 3]\n"net.ipv4.tcp_mtu_probing" = 2\n'),
        host,
        state_dir=state_dir,
    )
    report = revert(host, state_dir=state_dir)
    assert report.exit_code == 0
    out = by_setting(report)
    assert out["net.ipv4.tcp_rmem"] == Outcome(
        "sysctl", "net.ipv4.tcp_rmem", CHANGED, "1 2 3", "4096 131072 6291456"
    )
    after = {rel: (root / rel).read_text() for rel in TREE}
    assert {k: v.split() for k, v in after.items()} == {k: v.split() for k, v in before.items()}
    assert not state_path(state_dir, NETNS).exists()
    again = revert(host, state_dir=state_dir)
    assert again.outcomes == [] and again.note is not None and "nothing to revert" in again.note


def test_revert_keeps_what_it_could_not_restore(root: Path, host: Host, state_dir: Path) -> None:
    apply_profile(LFN, host, state_dir=state_dir)
    (root / "net/ipv4/tcp_rmem").chmod(0o444)
    report = revert(host, state_dir=state_dir)
    assert report.exit_code == 3
    assert by_setting(report)["net.ipv4.tcp_rmem"].result == REFUSED
    assert value(root, "net.ipv4.tcp_congestion_control") == "cubic"
    saved = read_state(state_path(state_dir, NETNS))
    assert saved is not None and [e.name for e in saved.entries.values()] == ["net.ipv4.tcp_rmem"]
    (root / "net/ipv4/tcp_rmem").chmod(0o644)
    assert revert(host, state_dir=state_dir).exit_code == 0
    assert value(root, "net.ipv4.tcp_rmem") == "4096 131072 6291456"
    assert not state_path(state_dir, NETNS).exists()


def test_dry_run_changes_nothing(root: Path, host: Host, state_dir: Path) -> None:
    before = {rel: (root / rel).read_text() for rel in TREE}
    p = profile(LFN_TEXT_WITH_NIC)
    report = apply_profile(p, host, interfaces=["veth0"], state_dir=state_dir, dry_run=True)
    out = by_setting(report)
    assert out["net.ipv4.tcp_rmem"].result == WOULD_CHANGE
    assert out["net.ipv4.tcp_rmem"].after == "4096 131072 134217728"
    assert out["net.core.rmem_max"].result == REFUSED  # foreseen without writing
    assert out["veth0 mtu"].result == WOULD_CHANGE
    assert {rel: (root / rel).read_text() for rel in TREE} == before
    assert host.links.lookup("veth0") == LinkState(7, 1500, 1000)
    assert not state_dir.exists()
    assert report.dry_run and "dry run" in format_table(report)


LFN_TEXT_WITH_NIC = """
[sysctl]
"net.ipv4.tcp_rmem" = [4096, 131072, 134217728]
"net.core.rmem_max" = 134217728
[nic."*"]
mtu = 9000
txqueuelen = 10000
[nic."*".coalesce]
adaptive-rx = true
rx-usecs = 8
"""


def test_nic_settings_apply_and_revert(host: Host, state_dir: Path) -> None:
    p = profile(LFN_TEXT_WITH_NIC)
    report = apply_profile(p, host, interfaces=["veth0"], state_dir=state_dir)
    out = by_setting(report)
    assert out["veth0 mtu"] == Outcome("link", "mtu", CHANGED, "1500", "9000", "veth0")
    assert out["veth0 txqueuelen"].result == CHANGED
    assert out["veth0 coalesce adaptive-rx"].after == "on"
    assert out["veth0 coalesce rx-usecs"].result == UNCHANGED
    assert host.links.lookup("veth0") == LinkState(7, 9000, 10000)
    report = revert(host, state_dir=state_dir)
    assert report.exit_code == 0
    assert host.links.lookup("veth0") == LinkState(7, 1500, 1000)
    assert host.coalescer.read("veth0") == {"adaptive-rx": "off", "rx-usecs": "8"}


def test_nic_refusals_name_the_reason(root: Path, state_dir: Path) -> None:
    links = FakeLinks()
    links.max_mtu = 4000
    host = Host(Sysctl(root), links, Ethtool(binary=None), NETNS)
    p = profile('[nic."*"]\nmtu = 9000\ntxqueuelen = 5000\n[nic."*".coalesce]\nrx-usecs = 50\n')
    report = apply_profile(p, host, interfaces=["veth0", "eth9"], state_dir=state_dir)
    out = by_setting(report)
    assert out["veth0 mtu"].result == REFUSED
    assert out["veth0 mtu"].reason == "EINVAL: Invalid argument"
    assert out["veth0 txqueuelen"].result == CHANGED
    assert out["veth0 coalesce rx-usecs"].result == REFUSED
    assert (out["veth0 coalesce rx-usecs"].reason or "").startswith("ethtool not installed")
    for name in ("eth9 mtu", "eth9 txqueuelen", "eth9 coalesce rx-usecs"):
        assert out[name].reason == "ENODEV: no network device eth9 here"
    assert report.exit_code == 3
    saved = read_state(state_path(state_dir, NETNS))
    assert saved is not None and [e.name for e in saved.entries.values()] == ["txqueuelen"]


def test_revert_skips_an_interface_that_is_gone(host: Host, state_dir: Path) -> None:
    apply_profile(
        profile('[nic."*"]\nmtu = 9000\n'), host, interfaces=["veth0"], state_dir=state_dir
    )
    assert isinstance(host.links, FakeLinks)
    del host.links.links["veth0"]
    report = revert(host, state_dir=state_dir)
    (o,) = report.outcomes
    assert o.result == SKIPPED and o.reason == "veth0 is gone: nothing to restore"
    assert report.exit_code == 0
    assert not state_path(state_dir, NETNS).exists()


def test_state_file_is_per_network_namespace(root: Path, state_dir: Path) -> None:
    a = Host(Sysctl(root), FakeLinks(), FakeCoalescer(), 1111)
    b = Host(Sysctl(root), FakeLinks(), FakeCoalescer(), 2222)
    apply_profile(LFN, a, state_dir=state_dir)
    assert state_path(state_dir, 1111).exists()
    assert revert(b, state_dir=state_dir).outcomes == []
    assert value(root, "net.ipv4.tcp_rmem") == "4096 131072 134217728"


def test_parse_coalesce_reads_ethtool_output() -> None:
    text = (
        "Coalesce parameters for eth0:\nAdaptive RX: on  TX: n/a\nstats-block-usecs: n/a\n"
        "sample-interval: 0\n\nrx-usecs: 50\nrx-frames: n/a\n"
    )
    assert parse_coalesce(text) == {"adaptive-rx": "on", "sample-interval": "0", "rx-usecs": "50"}


# ------------------------------------------------------------------ the command


def tune_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_tune_arguments(parser)
    return parser.parse_args(list(argv))


def test_cli_json_report_and_exit_code(host: Host, state_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "lfn.toml"
    path.write_text(
        '[sysctl]\n"net.ipv4.tcp_rmem" = [4096, 131072, 134217728]\n"net.core.rmem_max" = 1\n'
    )
    out = io.StringIO()
    rc = run_tune(
        tune_args("--profile", str(path), "--json", "--state-dir", str(state_dir)), host, out
    )
    assert rc == 3
    data = json.loads(out.getvalue())
    assert data["action"] == "apply" and data["profile"] == "lfn" and data["exit_code"] == 3
    assert data["counts"]["changed"] == 1 and data["counts"]["refused"] == 1
    rmem = data["settings"][0]
    assert rmem["setting"] == "net.ipv4.tcp_rmem" and rmem["before"] == "4096 131072 6291456"
    out = io.StringIO()
    assert run_tune(tune_args("--revert", "--state-dir", str(state_dir)), host, out) == 0
    lines = out.getvalue().splitlines()
    assert lines[1].split() == ["setting", "before", "after", "result"]
    assert lines[2].split()[0] == "net.ipv4.tcp_rmem" and lines[2].split()[-1] == "changed"


def test_cli_bad_profile_exits_2(
    host: Host, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[nic.eth1]\nmtu = true\n")
    assert run_tune(tune_args("--profile", str(path)), host, io.StringIO()) == 2
    assert "nic.eth1.mtu: must be an integer, not a boolean" in capsys.readouterr().err
    assert run_tune(tune_args("--profile", "no-such-profile"), host, io.StringIO()) == 2


def test_reservoir_agent_tune_is_registered() -> None:
    args = build_parser().parse_args(
        ["agent", "tune", "--profile", "lfn-1g", "--interface", "eth1", "--dry-run"]
    )
    assert args.profile == "lfn-1g" and args.interface == ["eth1"] and args.dry_run
    assert args.func.__name__ == "tune"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["agent", "tune", "--profile", "x", "--revert"])
    assert os.fspath(build_parser().parse_args(["agent", "tune", "--revert"]).state_dir) == (
        "/run/reservoir-tuning"
    )


@pytest.fixture
def own_netns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake host's namespace taken for the host's own (persisting is allowed)."""
    monkeypatch.setattr(tuning_cli, "other_netns", lambda inode: False)


def test_a_namespace_is_the_hosts_own_by_pid_1s_or_else_by_not_being_named(
    tmp_path: Path,
) -> None:
    mine = os.stat("/proc/self/ns/net").st_ino
    init = tmp_path / "init-ns"
    init.touch()
    assert other_netns(mine, init)  # PID 1's readable and different
    assert not other_netns(init.stat().st_ino, init)
    named = tmp_path / "netns"
    named.mkdir()
    (named / "lab").touch()
    missing = tmp_path / "unreadable"
    assert other_netns((named / "lab").stat().st_ino, missing, named)  # ip netns named it
    assert not other_netns(mine, missing, named)


@pytest.mark.usefixtures("own_netns")
def test_persist_keeps_the_sysctl_values_in_sysctl_d_and_revert_removes_them(
    host: Host, state_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "lfn.toml"
    path.write_text(
        '[sysctl]\n"net.ipv4.tcp_rmem" = [4096, 131072, 134217728]\n'
        '"net.ipv4.tcp_no_such_knob" = { value = 1, optional = true }\n'
    )
    d = tmp_path / "sysctl.d"
    common = ("--state-dir", str(state_dir), "--sysctl-dir", str(d))
    out = io.StringIO()
    run_tune(tune_args("--profile", str(path), "--persist", *common), host, out)
    kept = d / "60-reservoir.conf"
    assert f"kept across reboots: {kept}" in out.getvalue()
    lines = kept.read_text().splitlines()
    assert lines[0].startswith("# written by reservoir agent tune --persist")
    assert "net.ipv4.tcp_rmem = 4096 131072 134217728" in lines
    assert "-net.ipv4.tcp_no_such_knob = 1" in lines  # optional: ignored where missing
    assert kept.stat().st_mode & 0o777 == 0o644
    out = io.StringIO()
    assert run_tune(tune_args("--revert", *common), host, out) == 0
    assert f"removed {kept}" in out.getvalue() and not kept.exists()


def test_persist_is_refused_inside_another_namespace_and_over_a_file_not_ours(
    host: Host,
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tuning_cli, "other_netns", lambda inode: True)
    path = tmp_path / "lfn.toml"
    path.write_text('[sysctl]\n"net.ipv4.tcp_rmem" = [4096, 131072, 134217728]\n')
    d = tmp_path / "sysctl.d"
    args = tune_args(
        "--profile", str(path), "--persist", "--state-dir", str(state_dir), "--sysctl-dir", str(d)
    )
    assert run_tune(args, host, io.StringIO()) == 1
    assert "host's own network namespace" in capsys.readouterr().err
    assert not (d / "60-reservoir.conf").exists()
    d.mkdir()
    (d / "60-reservoir.conf").write_text("vm.swappiness = 1\n")
    monkeypatch.setattr(tuning_cli, "other_netns", lambda inode: False)
    assert run_tune(args, host, io.StringIO()) == 1
    assert "not written by Reservoir: left as it is" in capsys.readouterr().err
    assert (d / "60-reservoir.conf").read_text() == "vm.swappiness = 1\n"
