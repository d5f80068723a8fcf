"""``reservoir server [--db URL] [--listen HOST:PORT] [--config FILE] [--scheduler agents|off]``.

Settings come from the ``[server]`` table of ``--config``, the ``RESERVOIR_SERVER_*``
environment, then these options (``core/config.py``). ``--hash-token`` reads a token
on standard input and prints the digest to put in a configuration file.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register", "serve"]

Sub = Any  # argparse's _SubParsersAction is private


def register(sub: Sub) -> None:
    p = sub.add_parser("server", help="the coordinator: REST API for agents and transfers")
    p.add_argument("--db", metavar="URL", help="SQLAlchemy database URL (default: SQLite)")
    p.add_argument("--listen", metavar="HOST:PORT", help="default 127.0.0.1:8470")
    p.add_argument("--config", metavar="FILE", help="TOML file with a [server] table")
    p.add_argument(
        "--scheduler",
        choices=("agents", "off"),
        help="agents (default): run transfers on the agents; off: only record them",
    )
    p.add_argument(
        "--hash-token", action="store_true", help="print the digest of a token read on stdin"
    )
    p.set_defaults(func=serve)


def _hash_token() -> int:
    from reservoir.server.core.security import hash_token

    token = sys.stdin.readline().strip()
    if not token:
        print("reservoir server --hash-token: no token on standard input", file=sys.stderr)
        return 2
    print(hash_token(token))
    return 0


def serve(args: argparse.Namespace) -> int:
    if args.hash_token:
        return _hash_token()
    from reservoir.server.core.config import SettingsError, load_settings, with_generated_tokens
    from reservoir.server.serve import make_server

    try:
        settings = load_settings(
            args.config, database_url=args.db, listen=args.listen, scheduler=args.scheduler
        )
    except SettingsError as exc:
        print(f"reservoir server: {exc}", file=sys.stderr)
        return 2
    settings, made = with_generated_tokens(settings)
    for kind, token in made.items():  # development only, shown once, never logged
        print(f"reservoir server: development {kind} token: {token}", file=sys.stderr)
    server = make_server(settings)
    try:
        server.run()
    except OSError as exc:
        print(f"reservoir server: {exc}", file=sys.stderr)
        return 1
    return 0 if server.started else 1
