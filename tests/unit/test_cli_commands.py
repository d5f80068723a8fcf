"""The ``reservoir`` command imports only the module of the sub-command it runs."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from reservoir.cli import COMMANDS, build_parser, main


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_module_registers_the_command_it_is_listed_for(name: str) -> None:
    sub = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(COMMANDS[name]).register(sub)
    assert list(sub.choices) == [name]


def test_the_whole_parser_has_every_command() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(sub.choices) == sorted(COMMANDS)


def test_a_copy_does_not_import_the_coordinator() -> None:
    probe = (
        "import sys\n"
        "from reservoir.cli import build_parser\n"
        "build_parser('copy').parse_args(['copy', 'a', 'b'])\n"
        "print(sorted(m for m in ('fastapi', 'sqlalchemy', 'reservoir.server.app') "
        "if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_unknown_command_is_refused_with_the_list_of_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["-v", "bogus"])
    assert exited.value.code == 2
    assert (
        "invalid choice: 'bogus' (choose from 'agent', 'target', 'copy'" in capsys.readouterr().err
    )


def _without_pydantic_settings(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run where pydantic-settings (of the coordinator extra) cannot be
    imported, as on a storage node."""
    probe = "import sys\nsys.modules['pydantic_settings'] = None\n" + code
    return subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )


def test_without_the_coordinator_extra_the_command_list_says_so() -> None:
    proc = _without_pydantic_settings(
        "from reservoir.cli import main\nsys.argv = ['reservoir']\nmain(['--help'])"
    )
    assert proc.returncode == 0, proc.stderr
    listing = " ".join(proc.stdout.split())  # as argparse wrapped it
    assert "server (not installed here: pip install 'reservoir[coordinator]')" in listing
    assert "system this host's service manager" in listing


def test_without_the_coordinator_extra_the_server_is_refused_in_one_line() -> None:
    proc = _without_pydantic_settings(
        "from reservoir.cli import main\nsys.exit(main(['-v', 'server', '--listen', 'x:1']))"
    )
    assert proc.returncode == 1
    assert proc.stderr == (
        "reservoir server: not installed here: pydantic_settings missing "
        "(pip install 'reservoir[coordinator]')\n"
    )
