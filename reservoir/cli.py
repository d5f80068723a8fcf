"""The ``reservoir`` command: one sub-command per component."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

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
}
"""Each sub-command and the module whose ``register(sub)`` adds it. Only the module
of the command being run is imported: the coordinator's modules alone take about a
second to import, which a copy or a target should not wait for."""


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
            importlib.import_module(module).register(sub)
    return parser


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
