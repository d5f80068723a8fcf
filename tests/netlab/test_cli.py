"""``reservoir lab up|link|down``: each in its own process, acting on the same lab."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reservoir.lab import netns
from reservoir.lab.cli import state_path
from reservoir.lab.network import LabState, proc_start_time

from .conftest import need_lab

pytestmark = pytest.mark.integration

MAIN = """
import argparse, sys
from reservoir.lab import cli
parser = argparse.ArgumentParser(prog="reservoir")
cli.register(parser.add_subparsers(required=True))
args = parser.parse_args(sys.argv[1:])
sys.exit(args.func(args))
"""

SPEC = """
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
name = "l1"
a = "a"
b = "b"
a_addr = "10.201.7.1/24"
b_addr = "10.201.7.2/24"
rate_mbit = 100
delay_ms = 5
"""


def lab_cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", MAIN, "lab", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def link_state(ns: str) -> str:
    return netns.ns_run(ns, ["ip", "-o", "link", "show", "l1"])


def test_up_link_down_in_separate_processes(tmp_path: Path) -> None:
    need_lab()
    spec = tmp_path / "lab.toml"
    spec.write_text(SPEC)
    up = lab_cli("up", str(spec))
    assert up.returncode == 0, up.stderr
    state = LabState.from_json(state_path(spec).read_text())
    try:
        assert all(netns.exists(ns) for ns in state.namespaces)
        line = state.lines["l1"]
        assert proc_start_time(line.pid) == line.start
        again = lab_cli("up", str(spec))
        assert again.returncode == 1 and "is already up" in again.stderr
        assert lab_cli("link", str(spec), "l1", "down").returncode == 0
        assert "state DOWN" in link_state(f"{state.prefix}-a")
        assert lab_cli("link", str(spec), "l1", "up").returncode == 0
        assert "state DOWN" not in link_state(f"{state.prefix}-a")
    finally:
        down = lab_cli("down", str(spec))
    assert down.returncode == 0, down.stderr
    assert not [ns for ns in netns.names() if ns.startswith(state.prefix)]
    assert proc_start_time(line.pid) is None
    assert not state_path(spec).exists()
    gone = lab_cli("down", str(spec))
    assert gone.returncode == 1 and "no running lab" in gone.stderr


def test_bad_spec_is_reported(tmp_path: Path) -> None:
    spec = tmp_path / "lab.toml"
    spec.write_text(SPEC.replace("delay_ms = 5", "delay_ms = -5"))
    result = lab_cli("up", str(spec))
    assert result.returncode == 1
    assert "link[0] (l1).delay_ms: must be in [0, 10000], got -5" in result.stderr
