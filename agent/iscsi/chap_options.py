"""CHAP credentials given to a command: on the command line (where ``ps`` shows
them to every user of the host), in a file only its owner may read, or in an
environment variable. The target's commands and ``reservoir copy`` take the same
options.

``--chap USER:SECRET`` names both; with ``--chap-secret-file PATH`` or
``--chap-secret-env NAME`` the option's whole value is the user (so a user may be
an IQN, colons and all) and the secret comes from there.
"""

from __future__ import annotations

import argparse
import logging
import os
import stat
from pathlib import Path

from reservoir.agent.iscsi.chap import ChapError

__all__ = ["add_chap_arguments", "chap_credentials", "secret_from_env", "secret_from_file"]


def secret_from_file(path: str | Path) -> str:
    """The secret in ``path`` (one trailing newline dropped); refused when the file
    may be read or written by anyone but its owner."""
    try:
        mode = os.stat(path).st_mode
        if mode & 0o077:
            raise ChapError(
                f"{path}: the secret file is open to group or others (mode "
                f"{stat.S_IMODE(mode):04o}); chmod 600 {path}"
            )
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ChapError(f"{path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ChapError(f"{path}: the secret file is not UTF-8 text") from exc
    secret = text.removesuffix("\n").removesuffix("\r")
    if not secret:
        raise ChapError(f"{path}: the secret file is empty")
    return secret


def secret_from_env(name: str) -> str:
    secret = os.environ.get(name, "")
    if not secret:
        raise ChapError(f"environment variable {name} holds no secret (unset or empty)")
    return secret


def add_chap_arguments(p: argparse.ArgumentParser, option: str, what: str, *aliases: str) -> None:
    """``option`` (``--chap``, ``--mutual-chap``: USER[:SECRET]) with its
    ``-secret-file`` and ``-secret-env`` options; ``what`` ends its help."""
    p.add_argument(
        option,
        *aliases,
        dest=option.removeprefix("--").replace("-", "_"),
        metavar="USER[:SECRET]",
        help=f"CHAP user (and secret) {what}",
    )
    p.add_argument(
        f"{option}-secret-file",
        metavar="PATH",
        help=f"read the {option} secret from PATH (mode 0600; not on the command line)",
    )
    p.add_argument(
        f"{option}-secret-env",
        metavar="NAME",
        help=f"read the {option} secret from environment variable NAME",
    )


def chap_credentials(
    args: argparse.Namespace, name: str, log: logging.Logger
) -> tuple[str, str] | None:
    """The user and secret of option ``name`` (``chap``, ``mutual_chap``) as
    :func:`add_chap_arguments` parsed it (None: not given). A secret on the command
    line is taken with a warning to ``log``; a secret option without its user is
    refused rather than ignored."""
    value: str | None = getattr(args, name)
    option = "--" + name.replace("_", "-")
    secret_file: str | None = getattr(args, f"{name}_secret_file")
    secret_env: str | None = getattr(args, f"{name}_secret_env")
    if secret_file and secret_env:
        raise ChapError(f"{option}: give {option}-secret-file or {option}-secret-env, not both")
    if value is None:
        if secret_file or secret_env:
            raise ChapError(f"{option}-secret-file and {option}-secret-env need {option} USER")
        return None
    if secret_file:
        return value, secret_from_file(secret_file)
    if secret_env:
        return value, secret_from_env(secret_env)
    log.warning(
        "the %s secret is on the command line, where every user of this host can read it "
        "(ps); %s-secret-file or %s-secret-env keep it off",
        option,
        option,
        option,
    )
    user, sep, secret = value.partition(":")
    if not sep or not user or not secret:
        raise ChapError(
            f"{option}: expected USER:SECRET, or USER with {option}-secret-file PATH "
            f"or {option}-secret-env NAME"
        )
    return user, secret
