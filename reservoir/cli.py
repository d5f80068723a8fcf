"""The ``reservoir`` command: one sub-command per component."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from reservoir import __version__
from reservoir.agent import agent_cli
from reservoir.agent.target import cli as target_cli
from reservoir.agent.transfer import cli as transfer_cli
from reservoir.campaigns import cli as campaign_cli
from reservoir.common.errors import ReservoirError
from reservoir.common.logs import setup_logging
from reservoir.lab import cli as lab_cli
from reservoir.server.clients import cli as server_cli
from reservoir.server.clients import link_cli
from reservoir.server.clients import transfer_cli as coordinator_transfer_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reservoir",
        description="Wide-area block transfer over parallel iSCSI/TCP streams.",
    )
    parser.add_argument("--version", action="version", version=f"reservoir {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log detail")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    agent_cli.register(sub)
    target_cli.register(sub)
    transfer_cli.register(sub)
    lab_cli.register(sub)
    campaign_cli.register(sub)
    server_cli.register(sub)
    coordinator_transfer_cli.register(sub)
    link_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    try:
        rc: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    except ReservoirError as exc:  # one line for what a command did not handle itself
        print(f"reservoir {args.command}: {exc}", file=sys.stderr)
        return 1
    return rc
