"""``reservoir completion bash|zsh``: a shell completion script for every command, action
and option, written from the command line's own parser (so it cannot drift from it).

Install it once: ``reservoir completion bash > /etc/bash_completion.d/reservoir`` (or
``source <(reservoir completion bash)`` in ``~/.bashrc``); for zsh,
``source <(reservoir completion zsh)`` in ``~/.zshrc``. Words that are not options
complete as file names (configuration files, volumes)."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

__all__ = ["register", "script", "tree"]

Tree = dict[str, tuple[list[str], dict[str, list[str]]]]


def register(sub: Any) -> Any:
    p = sub.add_parser(
        "completion",
        help="print a bash or zsh completion script",
        description="Print a completion script: reservoir completion bash > "
        "/etc/bash_completion.d/reservoir, or source <(reservoir completion zsh).",
    )
    p.add_argument("shell", choices=["bash", "zsh"])
    p.set_defaults(func=_print)
    return None


def _print(args: argparse.Namespace) -> int:
    from reservoir.cli import build_parser  # noqa: PLC0415  # the whole parser, once

    sys.stdout.write(script(tree(build_parser()), zsh=args.shell == "zsh"))
    return 0


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps no public list of its sub-commands
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(s for a in parser._actions for s in a.option_strings if s.startswith("--"))


def tree(parser: argparse.ArgumentParser) -> Tree:
    """Each command: its options, and each of its actions with theirs."""
    return {
        name: (_options(command), {a: _options(p) for a, p in _subparsers(command).items()})
        for name, command in _subparsers(parser).items()
    }


def script(commands: Tree, *, zsh: bool = False) -> str:
    """The bash function (zsh through bashcompinit) completing ``commands``."""
    cases = []
    for name, (options, actions) in sorted(commands.items()):
        branches = [
            f"            {shlex.quote(act)}) words={shlex.quote(' '.join(opts))} ;;"
            for act, opts in sorted(actions.items())
        ]
        cases.append(
            f"        {shlex.quote(name)})\n"
            f"            actions={shlex.quote(' '.join(sorted(actions)))}\n"
            f"            words={shlex.quote(' '.join(options))}\n"
            f'            case "$act" in\n' + "\n".join(branches) + "\n            esac ;;"
        )
    head = "autoload -U +X bashcompinit && bashcompinit\n" if zsh else ""
    return head + _TEMPLATE.replace("@COMMANDS@", " ".join(sorted(commands))).replace(
        "@CASES@", "\n".join(cases)
    )


_TEMPLATE = r"""# reservoir completion (written by `reservoir completion`)
_reservoir() {
    local cur=${COMP_WORDS[COMP_CWORD]} cmd="" act="" i w actions="" words=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        [[ $w == -* ]] && continue
        if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $act ]]; then act=$w; fi
    done
    if [[ -z $cmd ]]; then
        COMPREPLY=($(compgen -W "@COMMANDS@ --verbose --quiet --log-format --version" -- "$cur"))
        return
    fi
    case "$cmd" in
@CASES@
    esac
    if [[ -z $act && -n $actions && $cur != -* ]]; then
        COMPREPLY=($(compgen -W "$actions" -- "$cur"))
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$words --help" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -o filenames -F _reservoir reservoir
"""
