"""CHAP secrets given to the target's commands: on the command line (where ``ps``
shows them to every user), in a file only its owner may read, or in an
environment variable.

``--chap USER:SECRET`` names both; with ``--chap-secret-file PATH`` or
``--chap-secret-env NAME`` the option's whole value is the user (so a user
may be an IQN, colons and all) and the secret comes from there.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from reservoir.agent.target.config import Chap, ConfigError, parse_chap

__all__ = ["chap_from", "secret_from_env", "secret_from_file"]

log = logging.getLogger("reservoir.target")


def secret_from_file(path: str | Path) -> str:
    """The secret in ``path`` (one trailing newline dropped); refused when the file
    may be read or written by anyone but its owner."""
    try:
        mode = os.stat(path).st_mode
        if mode & 0o077:
            raise ConfigError(
                f"{path}: the secret file is open to group or others (mode "
                f"{stat.S_IMODE(mode):04o}); chmod 600 {path}"
            )
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: the secret file is not UTF-8 text") from exc
    secret = text.removesuffix("\n").removesuffix("\r")
    if not secret:
        raise ConfigError(f"{path}: the secret file is empty")
    return secret


def secret_from_env(name: str) -> str:
    secret = os.environ.get(name, "")
    if not secret:
        raise ConfigError(f"environment variable {name} holds no secret (unset or empty)")
    return secret


def chap_from(value: str, secret_file: str | None, secret_env: str | None, option: str) -> Chap:
    """The CHAP user and secret of ``option`` (``--chap``) and its secret options."""
    if secret_file and secret_env:
        raise ConfigError(f"{option}: give {option}-secret-file or {option}-secret-env, not both")
    if secret_file:
        return Chap(value, secret_from_file(secret_file))
    if secret_env:
        return Chap(value, secret_from_env(secret_env))
    log.warning(
        "the %s secret is on the command line, where every user of this host can read it "
        "(ps); %s-secret-file or %s-secret-env keep it off",
        option,
        option,
        option,
    )
    return parse_chap(value, option)
