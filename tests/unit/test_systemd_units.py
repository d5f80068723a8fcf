"""``reservoir system install-units``: the shipped systemd units, written with this
installation's ``reservoir`` into a folder of the test's, checked by systemd's own
``systemd-analyze verify``; files Reservoir did not write are left alone."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from reservoir.system import (
    MARK,
    UNITS,
    UnitFileError,
    hidden_from_units,
    install_units,
    remove_units,
    reservoir_executable,
)

FOREIGN = "[Unit]\nDescription=an operator's own unit\n"


@pytest.fixture
def reservoir() -> Path:
    """The ``reservoir`` script of the environment running the tests (a real file:
    verify checks that ExecStart's program exists)."""
    return reservoir_executable()


def service_lines(text: str) -> list[str]:
    """The settings of a unit's [Service] section, comments left out."""
    section = text.split("[Service]", 1)[1].split("\n[", 1)[0]
    return [line for line in section.splitlines() if line and not line.startswith("#")]


def test_installed_units_pass_systemd_analyze_verify(tmp_path: Path, reservoir: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package)")
    install_units(UNITS, tmp_path, reservoir)
    for name in UNITS.values():
        proc = subprocess.run(
            [analyze, "verify", str(tmp_path / name)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert (name, proc.returncode, proc.stderr) == (name, 0, "")


def test_a_unit_runs_this_installation_and_carries_the_mark(
    tmp_path: Path, reservoir: Path
) -> None:
    [outcome] = install_units(["agent"], tmp_path, reservoir)
    path = tmp_path / "reservoir-agent.service"
    text = path.read_text()
    assert outcome.action == "written"
    assert text.splitlines()[0] == MARK
    assert f"ExecStart={reservoir} agent serve --config /etc/reservoir/agent.toml" in text
    assert "@RESERVOIR@" not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_the_agent_unit_delegates_its_cgroup(tmp_path: Path, reservoir: Path) -> None:
    install_units(["agent"], tmp_path, reservoir)
    lines = service_lines((tmp_path / "reservoir-agent.service").read_text())
    assert "Delegate=yes" in lines
    assert not any(line.startswith("ProtectControlGroups=") for line in lines)


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_every_unit_restarts_on_failure(tmp_path: Path, reservoir: Path, unit: str) -> None:
    install_units([unit], tmp_path, reservoir)
    assert "Restart=on-failure" in service_lines((tmp_path / UNITS[unit]).read_text())


def test_the_coordinator_runs_unprivileged(tmp_path: Path, reservoir: Path) -> None:
    install_units(["coordinator"], tmp_path, reservoir)
    lines = service_lines((tmp_path / "reservoir-coordinator.service").read_text())
    assert {"DynamicUser=yes", "CapabilityBoundingSet=", "NoNewPrivileges=yes"} <= set(lines)
    assert "ProtectSystem=strict" in lines


def test_installing_again_changes_nothing_and_an_edited_unit_is_replaced(
    tmp_path: Path, reservoir: Path
) -> None:
    install_units(["target"], tmp_path, reservoir)
    path = tmp_path / "reservoir-target.service"
    assert [o.action for o in install_units(["target"], tmp_path, reservoir)] == ["unchanged"]
    path.write_text(f"{MARK}\n[Service]\nExecStart=/bin/true\n")
    assert [o.action for o in install_units(["target"], tmp_path, reservoir)] == ["replaced"]
    assert "target serve" in path.read_text()


def test_a_foreign_unit_file_is_refused_before_anything_is_written(
    tmp_path: Path, reservoir: Path
) -> None:
    foreign = tmp_path / "reservoir-target.service"
    foreign.write_text(FOREIGN)
    with pytest.raises(UnitFileError, match="not written by Reservoir"):
        install_units(["agent", "target"], tmp_path, reservoir)
    assert foreign.read_text() == FOREIGN
    assert not (tmp_path / "reservoir-agent.service").exists()


def test_a_masked_unit_is_left_masked(tmp_path: Path, reservoir: Path) -> None:
    masked = tmp_path / "reservoir-agent.service"
    masked.symlink_to("/dev/null")
    with pytest.raises(UnitFileError, match="link"):
        install_units(["agent"], tmp_path, reservoir)
    assert masked.is_symlink()


def test_remove_takes_away_only_units_reservoir_wrote(tmp_path: Path, reservoir: Path) -> None:
    install_units(["agent", "target"], tmp_path, reservoir)
    foreign = tmp_path / "reservoir-coordinator.service"
    foreign.write_text(FOREIGN)
    with pytest.raises(UnitFileError, match="not written by Reservoir"):
        remove_units(["agent", "coordinator"], tmp_path)
    assert (tmp_path / "reservoir-agent.service").exists()
    outcomes = remove_units(["agent", "target"], tmp_path)
    assert [o.action for o in outcomes] == ["removed", "removed"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reservoir-coordinator.service"]
    assert [o.action for o in remove_units(["agent"], tmp_path)] == ["absent"]


def test_a_path_systemd_would_split_or_expand_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnitFileError, match="absolute path"):
        install_units(["agent"], tmp_path, Path("/opt/my tools/reservoir"))
    assert list(tmp_path.iterdir()) == []


def test_a_script_the_units_hide_or_whose_interpreter_they_hide_is_named(
    tmp_path: Path,
) -> None:
    script = tmp_path / "reservoir"  # under /tmp: PrivateTmp= hides it
    script.write_text("#!/root/venv/bin/python3 -E\nimport sys\n")
    assert hidden_from_units(script) == [script.resolve(), Path("/root/venv/bin/python3")]


def test_an_installation_under_opt_is_not_hidden() -> None:
    assert hidden_from_units(Path("/opt/reservoir/.venv/bin/reservoir")) == []


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """``reservoir ARGV`` with the interpreter running the tests."""
    return subprocess.run(
        [sys.executable, "-m", "reservoir", *argv],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_the_command_writes_the_units_and_prints_the_systemctl_steps(tmp_path: Path) -> None:
    proc = run_cli("system", "install-units", "--unit-dir", str(tmp_path), "agent", "target")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "reservoir-agent.service",
        "reservoir-target.service",
    ]
    assert f"{tmp_path / 'reservoir-agent.service'}: written" in proc.stdout
    assert "systemctl daemon-reload" in proc.stdout
    assert "systemctl enable --now reservoir-agent.service reservoir-target.service" in proc.stdout


def test_a_dry_run_prints_the_units_and_writes_nothing(tmp_path: Path) -> None:
    proc = run_cli("system", "install-units", "--unit-dir", str(tmp_path), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert list(tmp_path.iterdir()) == []
    assert proc.stdout.count("would be written") == len(UNITS)
    assert "ExecStart=" in proc.stdout
    assert "systemctl daemon-reload" not in proc.stdout


def test_the_command_refuses_a_foreign_unit_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "reservoir-coordinator.service").write_text(FOREIGN)
    proc = run_cli("system", "install-units", "--unit-dir", str(tmp_path), "--remove")
    assert proc.returncode == 1
    assert proc.stderr.startswith("reservoir system: ")
    assert "not written by Reservoir: left as it is" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_the_command_refuses_an_unknown_unit(tmp_path: Path) -> None:
    proc = run_cli("system", "install-units", "--unit-dir", str(tmp_path), "web")
    assert proc.returncode == 2
    assert "unknown unit web" in proc.stderr
    assert list(tmp_path.iterdir()) == []
