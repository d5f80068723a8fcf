"""The package as a user installs it: a wheel built from a copy of the project, installed
into a fresh virtual environment outside the checkout, run from a folder that is not
the checkout.

The wheel is built by pip (no build isolation: the build tools of this environment) and
installed with ``--no-deps``; the fresh environment finds its dependencies through a
``.pth`` line naming this environment's site-packages, which holds no ``reservoir``
package (the editable install is an import hook that a ``.pth`` line does not load), so
every ``reservoir`` module and data file comes from the wheel. What is run: the
coordinator serving the dashboard and the shipped campaigns, a shipped tuning profile
applied in a network namespace, the BPF program and the delay line built from the
shipped sources, and a verified loopback copy into the installed target.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from reservoir.lab import netns
from reservoir.lab.peers import LOCALHOST, free_port, stop_process, wait_port

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parents[2]
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "build", "node_modules", "__pycache__", "*.so", "*.egg-info",
    ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", "campaign-runs", "out",
)  # fmt: skip
TOKEN = "wheel-test-user-token-" + secrets.token_hex(8)
IQN = "iqn.2026-11.org.reservoir:wheel"


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    home: Path  # the working folder of every command: not the checkout

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def env(self, **extra: str) -> dict[str, str]:
        # a fresh cache of its own: no RESERVOIR_CACHE from the caller's environment
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("PYTHON") and k != "RESERVOIR_CACHE"
        }
        return {**env, "XDG_CACHE_HOME": str(self.home / "cache"), **extra}

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, cwd=self.home, env=self.env(), capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip

    def python(self, code: str) -> str:
        proc = self.run(self.bin("python"), "-c", code)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    if not (PROJECT / "web" / "dist" / "index.html").is_file():
        pytest.skip("the dashboard is not built (web/dist): run make install")
    top = tmp_path_factory.mktemp("wheel")
    tree = top / "project"
    shutil.copytree(PROJECT, tree, ignore=NOT_COPIED, symlinks=True)
    shutil.copytree(PROJECT / "web" / "dist", tree / "web" / "dist", dirs_exist_ok=True)
    wheels = top / "wheels"
    pip = [sys.executable, "-m", "pip"]
    build = [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), "."]
    done = subprocess.run(build, cwd=tree, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    (wheel,) = wheels.glob("reservoir-*.whl")
    venv = top / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c", where], capture_output=True, text=True, check=True
    ).stdout.strip()
    Path(site, "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    add = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*add, str(wheel)], check=True, capture_output=True)
    home = top / "home"
    home.mkdir()
    return Installed(wheel, venv, home)


def test_the_wheel_carries_the_data_the_code_reads(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    shipped = {
        "reservoir/config/tuning/lfn-1g.toml",
        "reservoir/config/campaigns/lfn-2x500m-100ms.toml",
        "reservoir/config/lab/lfn-2x500m-100ms.toml",
        "reservoir/config/grafana/reservoir.json",
        "reservoir/config/prometheus/prometheus.yml",
        "reservoir/web/dist/index.html",
        "reservoir/web/dist/views/transfer.js",
        "reservoir/pacing/bpf/cwnd_clamp.bpf.c",
        "reservoir/lab/delayline/dline.c",
        "reservoir/server/app/alembic.ini",
        "reservoir/server/app/migrations/env.py",
        "reservoir/agent/target/server.py",
        "reservoir/py.typed",
    }
    assert shipped <= names
    assert not [n for n in names if "node_modules" in n or n.startswith("web/")]


def test_every_module_comes_from_the_installed_package(installed: Installed) -> None:
    out = installed.python(
        "import json, reservoir.agent.target.server as t, reservoir.pacing as p, "
        "reservoir.shipped as s; "
        "print(json.dumps([t.__file__, p.__file__, str(s.config_dir()), str(s.dashboard_dir())]))"
    )
    for path in json.loads(out):
        assert Path(path).is_relative_to(installed.venv), path


def test_the_installed_coordinator_serves_the_dashboard_and_the_campaigns(
    installed: Installed,
) -> None:
    port = free_port()
    env = installed.env(
        XDG_STATE_HOME=str(installed.home / "state"),
        RESERVOIR_SERVER_USER_TOKENS=json.dumps([TOKEN]),
    )
    argv = [installed.bin("reservoir"), "server", "--listen", f"{LOCALHOST}:{port}"]
    log = installed.home / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*argv, "--scheduler", "off"], cwd=installed.home, env=env, stdout=out, stderr=out
        )
    try:
        wait_port(LOCALHOST, port, timeout=30, proc=proc)
        base = f"http://{LOCALHOST}:{port}"
        page = httpx.get(f"{base}/")
        assert page.status_code == 200
        assert page.text == (PROJECT / "web" / "dist" / "index.html").read_text()
        assert httpx.get(f"{base}/views/transfer.js").status_code == 200
        auth = {"Authorization": f"Bearer {TOKEN}"}
        listed = httpx.get(f"{base}/api/v1/campaigns/available", headers=auth).json()
    except Exception:
        print(log.read_text())
        raise
    finally:
        stop_process(proc)
    shipped = sorted(p.stem for p in (PROJECT / "config" / "campaigns").glob("*.toml"))
    assert sorted(c["name"] for c in listed) == shipped
    assert all(c.get("error") is None and c["scenarios"] > 0 for c in listed), listed


def test_the_installed_package_builds_the_bpf_program_and_the_delay_line(
    installed: Installed,
) -> None:
    if shutil.which("clang") is None:
        pytest.skip("clang is not installed (run make install)")
    built = installed.python(
        "from reservoir.pacing._build import build as bpf; "
        "from reservoir.lab.delayline import build as dline; print(bpf()); print(dline())"
    ).splitlines()
    bpf, dline = (Path(p) for p in built)
    assert bpf.is_relative_to(installed.home / "cache") and dline.is_relative_to(installed.home)
    header = bpf.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 247  # EM_BPF
    assert os.access(dline, os.X_OK)


@pytest.fixture
def ns() -> Iterator[str]:
    reason = netns.can_create()
    if reason is not None:
        pytest.skip(f"cannot create network namespaces here: {reason}")
    name = f"rsvwheel{os.getpid()}"
    netns.add(name)
    try:
        netns.ns_run(name, ["ip", "link", "add", "wv0", "type", "veth", "peer", "name", "wv1"])
        yield name
    finally:
        netns.delete(name)


def test_the_installed_agent_applies_a_shipped_tuning_profile(
    installed: Installed, ns: str
) -> None:
    state = installed.home / "tuning"
    tune = [installed.bin("reservoir"), "agent", "tune", "--json", "--state-dir", str(state)]
    applied = installed.run(*netns.exec_argv(ns, [*tune, "--profile", "lfn-1g"]))
    report: dict[str, Any] = json.loads(applied.stdout)
    by_name = {s["setting"]: s for s in report["settings"]}
    wanted = installed.python(
        "import tomllib; from reservoir.shipped import config_dir; "
        "p = tomllib.loads((config_dir() / 'tuning/lfn-1g.toml').read_text()); "
        "print(' '.join(map(str, p['sysctl']['net.ipv4.tcp_rmem'])))"
    )
    assert by_name["net.ipv4.tcp_rmem"]["result"] in ("changed", "unchanged")
    assert netns.ns_run(ns, ["cat", "/proc/sys/net/ipv4/tcp_rmem"]).split() == wanted.split()
    reverted = installed.run(*netns.exec_argv(ns, [*tune, "--revert"]))
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr


def test_the_installed_package_copies_into_its_target_and_verifies(
    installed: Installed, tmp_path: Path
) -> None:
    source, lun = tmp_path / "source.img", tmp_path / "lun.img"
    source.write_bytes(os.urandom(8 << 20) * 3)
    with open(lun, "wb") as f:
        f.truncate(24 << 20)
    port = free_port()
    serve = [installed.bin("reservoir"), "target", "serve", "--portal", f"{LOCALHOST}:{port}"]
    target = subprocess.Popen(
        [*serve, "--iqn", IQN, "--lun", str(lun), "--open"], cwd=installed.home,
        env=installed.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_port(LOCALHOST, port, timeout=30, proc=target)
        url = f"iscsi://{LOCALHOST}:{port}/{IQN}/0"
        copy = installed.run(installed.bin("reservoir"), "copy", str(source), url, "--streams", "2")
    finally:
        stop_process(target)
    assert copy.returncode == 0, copy.stderr
    assert "verified" in copy.stdout and "equal to the source" in copy.stdout
    assert lun.read_bytes() == source.read_bytes()
