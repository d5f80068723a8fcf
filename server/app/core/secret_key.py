"""The coordinator's secret key: 32 random bytes in a file of their own, outside the
database (``core/agent_credentials.py`` derives every agent's tokens from it).

The file holds the key as 64 hexadecimal digits and a newline. It is created at first
start if missing, atomically and private: written to a temporary file opened with
``O_CREAT | O_EXCL`` and mode 0600, then linked under its name (a coordinator starting
beside another one reads the other's key, never a half-written file); its folder is
created 0700. A key file that group or others may access, that cannot be read, or that
does not hold 64 hexadecimal digits is refused with :class:`SecretKeyError`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from reservoir.server.app.errors import ServerError

__all__ = ["KEY_BYTES", "SecretKeyError", "load_or_create"]

KEY_BYTES = 32


class SecretKeyError(ServerError):
    """The key file is unusable; the message names it and says what to do."""


def load_or_create(path: Path) -> bytes:
    """The key in ``path``, created first if the file does not exist."""
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    try:
        _create(path)
    except FileExistsError:  # another process made it meanwhile: read theirs
        pass
    except OSError as exc:
        raise SecretKeyError(f"secret key {path}: cannot create it: {exc.strerror}") from None
    return _read(path)


def _read(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
            if mode & 0o077:
                raise SecretKeyError(
                    f"secret key {path}: group or others may access it (mode {mode:04o}); "
                    f"chmod 600 {path}"
                )
            text = f.read(2 * KEY_BYTES + 2)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise SecretKeyError(f"secret key {path}: cannot read it: {exc.strerror}") from None
    return _parse(path, text)


def _parse(path: Path, text: bytes) -> bytes:
    try:
        key = bytes.fromhex(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise SecretKeyError(
            f"secret key {path}: expected {2 * KEY_BYTES} hexadecimal digits "
            f"({KEY_BYTES} bytes); remove the file to have a new key made"
        )
    return key


def _create(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, (secrets.token_bytes(KEY_BYTES).hex() + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temp, path)  # fails if the name exists: never replaces a key
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
