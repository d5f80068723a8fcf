"""``reservoir server [--db URL] [--listen HOST:PORT] [--config FILE] [--scheduler agents|off]``
and ``reservoir server agent-credentials NAME [--config FILE]``.

Settings come from the ``[server]`` table of ``--config``, the ``RESERVOIR_SERVER_*``
environment, then these options (``core/config.py``). ``--hash-token`` reads a token
on standard input and prints the digest to put in a configuration file.
``agent-credentials`` prints what agent NAME's configuration needs: the digest of the
coordinator's control token for it, and its heartbeat token (both derived from the
coordinator's secret key, made if missing; ``core/agent_credentials.py``).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from reservoir.common.tokens import hash_token
from reservoir.server.app.core.agent_credentials import AgentCredentials
from reservoir.server.app.core.config import SettingsError, load_settings, with_generated_tokens
from reservoir.server.app.core.secret_key import SecretKeyError

__all__ = ["register", "serve"]

Sub = Any  # argparse's _SubParsersAction is private
AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")  # as models.Name


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
    tools = p.add_subparsers(dest="server_command", metavar="{agent-credentials}")
    creds = tools.add_parser(
        "agent-credentials",
        help="print what an agent's configuration needs to trust this coordinator",
    )
    creds.add_argument("name", metavar="NAME", help="the agent's name, as it registers")
    creds.add_argument(
        "--config",
        dest="credentials_config",
        metavar="FILE",
        help="TOML file with a [server] table (where the secret key is)",
    )
    creds.add_argument(
        "--generation",
        type=int,
        default=0,
        metavar="N",
        help="the token generation (0 at registration; +1 at each rotation: "
        "reservoir agent update NAME --rotate-tokens)",
    )
    creds.set_defaults(func=agent_credentials)


def _hash_token() -> int:
    token = sys.stdin.readline().strip()
    if not token:
        print("reservoir server --hash-token: no token on standard input", file=sys.stderr)
        return 2
    print(hash_token(token))
    return 0


def agent_credentials(args: argparse.Namespace) -> int:
    prog = "reservoir server agent-credentials"
    if not AGENT_NAME.fullmatch(args.name):
        print(f"{prog}: {args.name!r} is not a valid agent name", file=sys.stderr)
        return 2
    try:
        # only the key's place is needed: tokens kept in a service's environment
        # need not be in the operator's shell
        config = args.credentials_config or args.config
        settings = load_settings(config, environment="development")
        credentials = AgentCredentials.from_file(settings.secret_key_path)
    except (SettingsError, SecretKeyError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    print(_credentials_text(args.name, credentials, args.generation), end="")
    return 0


def _credentials_text(name: str, credentials: AgentCredentials, generation: int = 0) -> str:
    which = f" (token generation {generation})" if generation else ""
    return (
        f"# agent {name}{which}: in the [agent] table of its configuration file, the\n"
        "# digest of the token this coordinator presents to it\n"
        f'tokens = ["{credentials.control_digest(name, generation)}"]\n'
        "# and its heartbeat token, which it presents to this coordinator: alone in a file\n"
        "# only the agent reads (chmod 600), named in the same table as\n"
        '# coordinator_token_file = "FILE", with coordinator = "URL of this coordinator"\n'
        "# for the agent to send its heartbeats\n"
        f"{credentials.heartbeat_token(name, generation)}\n"
    )


def serve(args: argparse.Namespace) -> int:
    if args.hash_token:
        return _hash_token()
    # Lazy: the app, FastAPI, uvicorn and SQLAlchemy (0.85 s) load for `server` only.
    from reservoir.server.app.serve import make_server  # noqa: PLC0415

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
    try:
        server = make_server(settings)
    except SecretKeyError as exc:
        print(f"reservoir server: {exc}", file=sys.stderr)
        return 2
    try:
        server.run()
    except OSError as exc:
        print(f"reservoir server: {exc}", file=sys.stderr)
        return 1
    return 0 if server.started else 1
