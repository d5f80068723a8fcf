"""The install profiles of scripts/install.sh, the extras of pyproject.toml and the pins
of constraints.txt, held to each other.

No profile is installed here (that takes apt and the network): ``install.sh --list``
prints what a profile would install, computed by the script itself, and that is what
is checked.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

PROJECT = Path(__file__).resolve().parents[2]
INSTALL = PROJECT / "scripts" / "install.sh"
PROFILES = ("agent", "coordinator", "dev")
# Nothing a storage node needs to serve and copy: browsers, peers and tools of the
# tests and benches, the BPF compiler (the agent falls back to SO_MAX_PACING_RATE
# without it), the dashboard's build and the coordinator's database server.
NOT_ON_STORAGE_NODES = {
    "chromium", "tgt", "libiscsi-bin", "clang", "llvm", "libbpf-dev",
    "qemu-system-x86", "qemu-utils", "mmdebstrap", "globus-gridftp-server-progs",
    "globus-gass-copy-progs", "xrootd-server", "xrootd-client", "nodejs", "npm",
    "postgresql", "prometheus",
}  # fmt: skip


def install_list(*options: str) -> str:
    """What ``install.sh OPTIONS --list`` prints."""
    return subprocess.run(
        ["bash", str(INSTALL), *options, "--list"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip


@cache
def listed(profile: str, *options: str) -> tuple[frozenset[str], tuple[str, ...]]:
    """(Debian packages, pip extras) that ``install.sh --profile PROFILE`` installs."""
    out = install_list("--profile", profile, *options)
    fields = dict(line.split(":", 1) for line in out.splitlines())
    extras = tuple(e for e in fields["extras"].strip().split(",") if e)
    return frozenset(fields["apt"].split()), extras


@cache
def pyproject() -> dict[str, Any]:
    """The [project] table."""
    with open(PROJECT / "pyproject.toml", "rb") as f:
        project: dict[str, Any] = tomllib.load(f)["project"]
    return project


def extras() -> dict[str, list[str]]:
    """[project.optional-dependencies]: extra -> its requirements."""
    found: dict[str, list[str]] = pyproject()["optional-dependencies"]
    return found


def requirements() -> list[Requirement]:
    """Every requirement pyproject.toml names: the dependencies and each extra's."""
    named = [*pyproject()["dependencies"], *(r for group in extras().values() for r in group)]
    return [Requirement(r) for r in named]


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def pins() -> dict[str, str]:
    """constraints.txt: normalised name -> pinned version."""
    found = {}
    for line in (PROJECT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, pinned = line.partition("==")
            assert sep and pinned.strip(), f"not a pin: {line!r}"
            found[normalised(name.strip())] = pinned.strip()
    return found


def test_the_agent_profile_installs_no_browser_peer_compiler_or_dashboard_build() -> None:
    apt, _ = listed("agent")
    assert apt & NOT_ON_STORAGE_NODES == set()


def test_the_agent_profile_has_what_serving_and_copying_need() -> None:
    apt, extras = listed("agent")
    assert {"liburing-dev", "python3-venv", "iproute2", "ethtool", "iperf3"} <= apt
    assert extras == ()  # the dependencies alone: no coordinator, no test tools


def test_with_bpf_adds_the_bpf_toolchain_to_the_agent() -> None:
    apt, _ = listed("agent", "--with-bpf")
    assert apt - listed("agent")[0] == {"clang", "llvm", "libbpf-dev", "bpftool"}


def test_the_coordinator_profile_builds_the_dashboard_and_installs_its_extra() -> None:
    apt, extras = listed("coordinator")
    assert {"nodejs", "npm"} <= apt
    assert "chromium" not in apt and "tgt" not in apt
    assert extras == ("coordinator",)


def test_the_dev_profile_is_every_profile_and_the_test_tools() -> None:
    apt, extras = listed("dev")
    assert listed("agent", "--with-bpf")[0] | listed("coordinator")[0] <= apt
    assert {"nodejs", "npm", "postgresql", "prometheus", "chromium", "tgt"} <= apt
    assert set(extras) == {"coordinator", "lio", "dev"}


def test_dev_is_the_default_profile() -> None:
    assert install_list() == install_list("--profile", "dev")


def test_an_unknown_profile_is_refused() -> None:
    proc = subprocess.run(
        ["bash", str(INSTALL), "--profile", "storage", "--list"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "usage" in proc.stderr


@pytest.mark.parametrize("profile", PROFILES)
def test_every_extra_a_profile_installs_is_declared(profile: str) -> None:
    assert set(listed(profile)[1]) <= set(extras())


def test_the_coordinator_extra_brings_the_postgresql_driver() -> None:
    named = {Requirement(r).name: Requirement(r) for r in extras()["coordinator"]}
    assert "binary" in named["psycopg"].extras


def test_constraints_pin_every_requirement_of_pyproject() -> None:
    missing = sorted(r.name for r in requirements() if normalised(r.name) not in pins())
    assert missing == []


def test_every_pin_satisfies_the_minimum_pyproject_declares() -> None:
    unmet = [
        f"{r.name}=={pins()[normalised(r.name)]} against {r}"
        for r in requirements()
        if not r.specifier.contains(pins()[normalised(r.name)], prereleases=True)
    ]
    assert unmet == []


def test_constraints_leave_the_project_itself_out() -> None:
    assert normalised(str(pyproject()["name"])) not in pins()


def test_this_environment_runs_the_pinned_versions() -> None:
    """What `make install` installed is what constraints.txt says (scripts/constraints.sh
    rewrites it after an upgrade)."""
    differ = {}
    for name, pinned in pins().items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = None
        if installed != pinned:
            differ[name] = (pinned, installed)
    assert differ == {}
