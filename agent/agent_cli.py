"""``reservoir agent serve --config FILE``: the agent with its control API and builtin target;
``reservoir agent tune --profile NAME | --revert``: host tuning profiles (``agent.tuning``).

The file's ``[agent]`` table holds the settings (see ``config/agent.example.toml``);
``target_config`` names the builtin target's own TOML file (``reservoir target ...``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from reservoir.agent.tuning.cli import add_tune_arguments, run_tune

__all__ = ["main", "register", "serve", "tune"]

Sub = Any  # argparse's _SubParsersAction is private


def register(sub: Sub) -> Sub:
    parser = sub.add_parser(
        "agent", help="the agent: serve its control API and target, tune its host; register "
        "agents on the coordinator and list, show, update or remove them",
    )  # fmt: skip
    asub = parser.add_subparsers(dest="agent_command", required=True, metavar="ACTION")
    p = asub.add_parser("serve", help="serve the control API (and the target) until interrupted")
    p.add_argument("--config", required=True, help="TOML file with an [agent] table")
    p.add_argument("--listen", metavar="HOST:PORT", help="override agent.listen")
    p.set_defaults(func=serve)
    t = asub.add_parser(
        "tune",
        help="apply a host tuning profile (config/tuning/) or revert it",
        description="Apply a host tuning profile in this network namespace, or revert "
        "to the values from before. Exit 0: applied; 3: something refused; 2: bad profile.",
    )
    add_tune_arguments(t)
    t.set_defaults(func=tune)
    return asub


def serve(args: argparse.Namespace) -> int:
    # Lazy: FastAPI and uvicorn (0.8 s) load for `agent serve` only, not for every command.
    from reservoir.agent.control import (  # noqa: PLC0415
        Agent,
        AgentSettingsError,
        load_settings,
        make_server,
    )
    from reservoir.agent.control.core.config import parse_listen  # noqa: PLC0415
    from reservoir.agent.target.config import ConfigError  # noqa: PLC0415

    try:
        settings = load_settings(args.config)
        if args.listen:
            parse_listen(args.listen)
            settings = settings.model_copy(update={"listen": args.listen})
        agent = Agent(settings)
    except (AgentSettingsError, ConfigError, ValueError) as exc:
        print(f"reservoir agent serve: {exc}", file=sys.stderr)
        return 2
    server = make_server(settings, agent)
    try:
        server.run()  # uvicorn re-raises SIGINT/SIGTERM after a graceful stop
    except OSError as exc:
        print(f"reservoir agent serve: {exc}", file=sys.stderr)
        return 1
    return 0 if server.started else 1


def tune(args: argparse.Namespace) -> int:
    return run_tune(args)


def main(argv: list[str] | None = None) -> int:
    """``reservoir agent ...`` alone, until it is wired into ``reservoir.cli``."""
    parser = argparse.ArgumentParser(prog="reservoir")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s"
    )
    rc: int = args.func(args)
    return rc
