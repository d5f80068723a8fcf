"""``reservoir agent tune`` run for real inside a fresh network namespace
(``ip netns exec``), on a veth pair created there.

Only the namespace made here is tuned; the root namespace's settings are read
before and after each test to show they were left alone. What this kernel
refuses in a child namespace: net.core.rmem_max/wmem_max are read-only (0444)
and net.core.netdev_max_backlog/default_qdisc do not exist there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reservoir.lab import netns

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
VENV_RESERVOIR = REPO / ".venv" / "bin" / "reservoir"
DEV = "tv0"
WATCHED = (
    "net/ipv4/tcp_rmem",
    "net/ipv4/tcp_wmem",
    "net/ipv4/tcp_congestion_control",
    "net/ipv4/tcp_mtu_probing",
    "net/ipv4/tcp_no_metrics_save",
    "net/core/rmem_max",
)


def reservoir_argv() -> list[str]:
    if VENV_RESERVOIR.exists():
        return [str(VENV_RESERVOIR)]
    return [sys.executable, "-m", "reservoir"]


@pytest.fixture
def ns() -> Iterator[str]:
    reason = netns.can_create()
    if reason is not None:
        pytest.skip(f"cannot create network namespaces here: {reason}")
    if shutil.which("ip") is None:
        pytest.skip("ip is not installed (run make install)")
    name = f"rsvtune{os.getpid()}"
    root_before = root_values()
    netns.add(name)
    try:
        netns.ns_run(name, ["ip", "link", "add", DEV, "type", "veth", "peer", "name", "tv1"])
        yield name
    finally:
        netns.delete(name)
    assert root_values() == root_before, "the root namespace's settings changed"


def root_values() -> dict[str, str]:
    return {key: Path("/proc/sys", key).read_text() for key in WATCHED}


def ns_values(ns: str) -> dict[str, str]:
    """The raw files, as this namespace's kernel prints them."""
    return {key: netns.ns_run(ns, ["cat", f"/proc/sys/{key}"]) for key in WATCHED}


def ns_mtu(ns: str) -> int:
    (link,) = json.loads(netns.ns_run(ns, ["ip", "-j", "link", "show", DEV]))
    return int(link["mtu"])


def tune(ns: str, state_dir: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """Run the CLI in ``ns`` with --json; its exit status and report."""
    argv = [*reservoir_argv(), "agent", "tune", *args, "--json", "--state-dir", str(state_dir)]
    proc = subprocess.run(
        netns.exec_argv(ns, argv), capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.stdout, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return proc.returncode, report


def settings(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["setting"]: s for s in report["settings"]}


def ns_sysctl(ns: str, key: str) -> str:
    return netns.ns_run(ns, ["cat", f"/proc/sys/{key}"]).strip()


def other_cc(ns: str) -> str:
    """A congestion control the namespace may choose (a child namespace: only
    from tcp_allowed_congestion_control) and does not use now."""
    current = ns_sysctl(ns, "net/ipv4/tcp_congestion_control")
    allowed = ns_sysctl(ns, "net/ipv4/tcp_allowed_congestion_control").split()
    return next(cc for cc in allowed if cc != current)


def test_apply_and_revert_in_a_child_namespace(ns: str, tmp_path: Path) -> None:
    cc = other_cc(ns)
    profile = tmp_path / "netlab.toml"
    profile.write_text(
        f"""
[sysctl]
"net.ipv4.tcp_rmem" = [4096, 131072, 268435456]
"net.ipv4.tcp_wmem" = [4096, 16384, 268435456]
"net.ipv4.tcp_congestion_control" = "{cc}"
"net.core.rmem_max" = 268435456
[nic."*"]
mtu = 9000
"""
    )
    before = ns_values(ns)
    assert ns_mtu(ns) == 1500
    state_dir = tmp_path / "state"

    rc, report = tune(ns, state_dir, "--profile", str(profile), "--interface", DEV)
    out = settings(report)
    assert rc == 3 and report["exit_code"] == 3
    assert out["net.ipv4.tcp_rmem"]["result"] == "changed"
    assert out["net.ipv4.tcp_rmem"]["after"] == "4096 131072 268435456"
    assert out["net.ipv4.tcp_wmem"]["result"] == "changed"
    assert out["net.ipv4.tcp_congestion_control"]["after"] == cc
    assert out["net.core.rmem_max"]["result"] == "refused"
    assert out["net.core.rmem_max"]["reason"].startswith("EACCES")
    assert out[f"{DEV} mtu"] == {
        "setting": f"{DEV} mtu",
        "scope": "link",
        "name": "mtu",
        "result": "changed",
        "before": "1500",
        "after": "9000",
        "interface": DEV,
        "reason": None,
    }
    now = ns_values(ns)
    assert now["net/ipv4/tcp_rmem"].split() == ["4096", "131072", "268435456"]
    assert now["net/ipv4/tcp_wmem"].split()[2] == "268435456"
    assert now["net/ipv4/tcp_congestion_control"].strip() == cc
    assert now["net/core/rmem_max"] == before["net/core/rmem_max"]
    assert ns_mtu(ns) == 9000
    state_file = Path(report["state_file"])
    assert state_file.exists() and state_file.stat().st_mode & 0o777 == 0o600
    assert state_file.name == f"netns-{report['netns']}.json"
    assert report["netns"] != os.stat("/proc/self/ns/net").st_ino  # keyed by the child's

    rc, report = tune(ns, state_dir, "--revert")
    assert rc == 0, report
    assert report["counts"]["changed"] == 4 and report["counts"]["refused"] == 0
    assert ns_values(ns) == before  # byte for byte, as the kernel prints them
    assert ns_mtu(ns) == 1500
    assert not state_file.exists()


def test_shipped_profiles_stacked_then_reverted(ns: str, tmp_path: Path) -> None:
    before = ns_values(ns)
    state_dir = tmp_path / "state"
    rc, first = tune(ns, state_dir, "--profile", "lfn-1g", "--interface", DEV)
    assert rc == 3
    out = settings(first)
    assert {k for k, s in out.items() if s["result"] == "refused"} == {
        "net.core.rmem_max",
        "net.core.wmem_max",
        "net.core.netdev_max_backlog",  # global: absent in a child namespace
    }
    assert out["net.core.netdev_max_backlog"]["reason"].startswith("ENOENT")
    assert out["net.core.default_qdisc"]["result"] == "skipped"  # optional, absent here
    assert out["net.ipv4.tcp_mtu_probing"]["result"] == "changed"
    assert ns_mtu(ns) == 9000

    rc, second = tune(ns, state_dir, "--profile", "lfn-10g", "--interface", DEV)
    assert rc == 3
    out = settings(second)
    assert out["net.ipv4.tcp_rmem"]["before"] == "4096 131072 134217728"  # lfn-1g's
    assert out[f"{DEV} txqueuelen"]["after"] == "10000"
    assert out[f"{DEV} coalesce adaptive-rx"]["result"] == "refused"  # veth: no coalescing

    rc, report = tune(ns, state_dir, "--revert")
    assert rc == 0, report
    assert ns_values(ns) == before  # the values from before lfn-1g, not lfn-1g's
    assert ns_mtu(ns) == 1500
    (link,) = json.loads(netns.ns_run(ns, ["ip", "-j", "-d", "link", "show", DEV]))
    assert link["txqlen"] == 1000


def test_dry_run_in_a_child_namespace_writes_nothing(ns: str, tmp_path: Path) -> None:
    before = ns_values(ns)
    state_dir = tmp_path / "state"
    rc, report = tune(ns, state_dir, "--profile", "lfn-10g", "--interface", DEV, "--dry-run")
    assert rc == 3 and report["dry_run"]
    assert settings(report)["net.ipv4.tcp_rmem"]["result"] == "would change"
    assert ns_values(ns) == before
    assert ns_mtu(ns) == 1500
    assert not state_dir.exists()


def test_congestion_control_not_allowed_in_a_child_is_refused(ns: str, tmp_path: Path) -> None:
    available = ns_sysctl(ns, "net/ipv4/tcp_available_congestion_control").split()
    allowed = ns_sysctl(ns, "net/ipv4/tcp_allowed_congestion_control").split()
    restricted = [cc for cc in available if cc not in allowed]
    if not restricted:
        pytest.skip("every available congestion control is allowed in child namespaces here")
    before = ns_sysctl(ns, "net/ipv4/tcp_congestion_control")
    profile = tmp_path / "cc.toml"
    profile.write_text(f'[sysctl]\n"net.ipv4.tcp_congestion_control" = "{restricted[0]}"\n')
    rc, report = tune(ns, tmp_path / "state", "--profile", str(profile))
    assert rc == 3
    (o,) = report["settings"]
    assert o["result"] == "refused" and o["after"] == before
    assert o["reason"].startswith("EPERM") and "tcp_allowed_congestion_control" in o["reason"]
    assert ns_sysctl(ns, "net/ipv4/tcp_congestion_control") == before
