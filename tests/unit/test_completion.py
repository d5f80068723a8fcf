"""``reservoir completion``: the script completes commands, actions and options in a
real bash, from the command line's own parser."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from reservoir.cli import build_parser
from reservoir.completion import script, tree


def complete(words: list[str]) -> list[str]:
    """What bash offers for the last of ``words``."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    quoted = " ".join(f"'{w}'" for w in words)
    program = (
        f"{script(tree(build_parser()))}\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _reservoir\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_commands_actions_and_options_complete() -> None:
    assert complete(["reservoir", "ag"]) == ["agent"]
    assert complete(["reservoir", "agent", "re"]) == ["register", "remove"]
    assert complete(["reservoir", "-v", "transfer", "start", "--fr"]) == ["--from"]
    assert "--stripe-unit" in complete(["reservoir", "copy", "--s"])
    assert complete(["reservoir", "volume-set", ""]) == ["create", "list", "remove", "show"]


def test_every_command_of_the_parser_is_in_the_script() -> None:
    commands = tree(build_parser())
    assert {"agent", "transfer", "volume-set", "completion"} <= set(commands)
    assert sorted(complete(["reservoir", ""])) == sorted(
        [*commands, "--verbose", "--quiet", "--log-format", "--version"]
    )


def test_a_word_that_is_no_option_completes_as_a_file() -> None:
    offered = complete(["reservoir", "agent", "serve", "--config", "/etc/host"])
    assert "/etc/hostname" in offered or "/etc/hosts" in offered


def test_the_zsh_script_loads_bash_completion_first() -> None:
    assert script(tree(build_parser()), zsh=True).startswith("autoload -U +X bashcompinit")
