"""The ``reservoir`` command: one sub-command per component."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from reservoir import __version__
from reservoir.common.errors import ReservoirError
from reservoir.common.logs import FORMATS, setup_logging

COMMANDS = {
    "agent": "reservoir.agent.agent_cli",
    "target": "reservoir.agent.target.cli",
    "copy": "reservoir.agent.transfer.cli",
    "lab": "reservoir.lab.cli",
    "campaign": "reservoir.campaigns.cli",
    "server": "reservoir.server.clients.cli",
    "transfer": "reservoir.server.clients.transfer_cli",
    "link": "reservoir.server.clients.link_cli",
    "volume-set": "reservoir.server.clients.inventory_cli",
    "system": "reservoir.system.cli",
    "completion": "reservoir.completion",
}
"""Each sub-command and the module whose ``register(sub)`` adds it. Only the module
of the command being run is imported: the coordinator's modules alone take about a
second to import, which a copy or a target should not wait for."""

EXTENDS = {
    "agent": ("reservoir.server.clients.inventory_cli", "extend_agent"),
    "link": ("reservoir.server.clients.inventory_cli", "extend_link"),
}
"""Commands whose actions come from two modules: ``register(sub)`` of the first
returns its actions, and the function named here adds more (``reservoir agent
register|list|show|update|remove``: the coordinator's client, beside serve and tune)."""

EXTRAS = {"server": "coordinator"}
"""The commands whose modules need an optional dependency group (``pip install
'reservoir[coordinator]'``): an installation without it (a storage node's) lists
them as unavailable and refuses to run them, in one line."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every sub-command, or ``only`` that one."""
    parser = argparse.ArgumentParser(
        prog="reservoir",
        description="Wide-area block transfer over parallel iSCSI/TCP streams.",
    )
    parser.add_argument("--version", action="version", version=f"reservoir {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0,
        help="more log detail: -v Reservoir's debug messages, -vv every library's too",
    )  # fmt: skip
    parser.add_argument(
        "-q", "--quiet", action="count", default=0,
        help="less: -q warnings and errors only, -qq errors only",
    )  # fmt: skip
    parser.add_argument(
        "--log-format", choices=FORMATS, default="text",
        help="text (default) or json: one object a line (time, level, logger, message)",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        if only is None or name == only:
            _register(parser, sub, name, module, alone=only is not None)
    return parser


def _register(
    parser: argparse.ArgumentParser, sub: Any, name: str, module: str, *, alone: bool
) -> None:
    """Adds command ``name``; where its optional dependencies are not installed, an
    entry saying so (or, when it is the command being run, exit 1 with that line)."""
    try:
        actions = importlib.import_module(module).register(sub)
        if name in EXTENDS:
            extension, function = EXTENDS[name]
            getattr(importlib.import_module(extension), function)(actions)
    except ModuleNotFoundError as exc:
        if name not in EXTRAS or (exc.name or "reservoir").startswith("reservoir"):
            raise
        hint = f"pip install 'reservoir[{EXTRAS[name]}]'"
        if alone:
            parser.exit(1, f"reservoir {name}: not installed here: {exc.name} missing ({hint})\n")
        sub.add_parser(name, help=f"(not installed here: {hint})")


def _command(argv: Sequence[str]) -> str | None:
    """The sub-command named on the command line, if it is one (the options before it
    take no value)."""
    first = next((word for word in argv if not word.startswith("-")), None)
    return first if first in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command(words))
    args = parser.parse_args(words)
    setup_logging(args.verbose, args.quiet, args.log_format)
    try:
        rc: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    except ReservoirError as exc:  # one line for what a command did not handle itself
        print(f"reservoir {args.command}: {exc}", file=sys.stderr)
        return 1
    return rc
