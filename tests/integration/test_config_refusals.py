"""Each program that reads a TOML file refuses, in a real process, to start on a file
with an unknown key: exit status not 0, the file and the key on stderr, nothing served
or created."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config"
TOKEN = "0123456789abcdef0123"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reservoir(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``reservoir ARGS`` from this checkout, in a child process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESERVOIR_SERVER_")}
    env["PYTHONPATH"] = str(ROOT)
    try:
        return subprocess.run(
            [sys.executable, "-m", "reservoir", *args],
            cwd=cwd,
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=60,  # run() kills the child when it expires
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"reservoir {' '.join(args)} started instead of refusing its file")


def refused(proc: subprocess.CompletedProcess[str], path: Path, key: str) -> None:
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert str(path) in proc.stderr and key in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def nothing_listens(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_agent_serve_refuses_a_file_with_an_unknown_table(tmp_path: Path) -> None:
    port = free_port()
    path = tmp_path / "agent.toml"
    path.write_text(
        f'[agent]\nlisten = "127.0.0.1:{port}"\ntokens = ["{TOKEN}"]\nstate_dir = "state"\n'
        "[bogus]\nread_only = true\n"
    )
    proc = reservoir("agent", "serve", "--config", str(path), cwd=tmp_path)
    refused(proc, path, "[bogus]")
    assert TOKEN not in proc.stderr
    assert nothing_listens(port)
    assert not (tmp_path / "state").exists()


def test_server_refuses_a_file_with_an_unknown_key(tmp_path: Path) -> None:
    port = free_port()
    path = tmp_path / "server.toml"
    db = tmp_path / "server.db"
    path.write_text(
        f'[server]\nenvironment = "development"\nlisten = "127.0.0.1:{port}"\n'
        f'database_url = "sqlite:///{db}"\nschedular = "off"\n'
    )
    proc = reservoir("server", "--config", str(path), cwd=tmp_path)
    refused(proc, path, "server.schedular")
    assert nothing_listens(port)
    assert not db.exists()


def test_campaign_run_refuses_a_file_with_an_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "loopback.toml"
    text = (CONFIG / "campaigns" / "loopback.toml").read_text()
    path.write_text(text.replace("[matrix]", "[matrix]\nstream = 4", 1))
    out = tmp_path / "out"
    proc = reservoir("campaign", "run", str(path), "--out", str(out), cwd=tmp_path)
    refused(proc, path, "matrix.stream")
    assert not out.exists()


def test_agent_tune_refuses_a_profile_with_an_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[sysctl]\n"net.ipv4.tcp_mtu_probing" = 1\n[nic.eth1]\nmtus = 1500\n')
    state = tmp_path / "state"
    args = ("--profile", str(path), "--dry-run", "--state-dir", str(state))
    proc = reservoir("agent", "tune", *args, cwd=tmp_path)
    refused(proc, path, "nic.eth1.mtus")
    assert not state.exists()


def test_lab_up_refuses_a_spec_with_an_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "lab.toml"
    text = (CONFIG / "lab" / "direct.toml").read_text()
    path.write_text(text.replace("rate_mbit", "rate_mbits", 1))
    proc = reservoir("lab", "up", str(path), cwd=tmp_path)
    refused(proc, path, "rate_mbits")
