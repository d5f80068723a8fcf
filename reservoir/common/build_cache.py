"""Programs built at run time from shipped C sources (the delay line, the BPF sock_ops
program), each compiled once into the user's cache folder.

:func:`compiled` compiles ``source`` when the output is missing or older than the
source, into a temporary name first, so a reader never finds half a file; the cache
folder is ``$RESERVOIR_CACHE``, ``$XDG_CACHE_HOME/reservoir`` or ``~/.cache/reservoir``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from reservoir.common.errors import ReservoirError

__all__ = ["BuildError", "cache_dir", "compiled"]


class BuildError(ReservoirError):
    """A program could not be compiled; the message says why and what to install."""


def cache_dir() -> Path:
    """``$RESERVOIR_CACHE`` or ``$XDG_CACHE_HOME/reservoir`` or ``~/.cache/reservoir``."""
    env = os.environ.get("RESERVOIR_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "reservoir"


def compiled(
    source: Path,
    name: str,
    *,
    compiler: str,
    flags: Sequence[str],
    install_hint: str,
    out_dir: Path | None = None,
) -> Path:
    """The path of ``name`` built by ``compiler flags source -o name``, compiling it if
    it is missing or older than ``source``."""
    out = (out_dir or cache_dir()) / name
    if out.exists() and out.stat().st_mtime >= source.stat().st_mtime:
        return out
    exe = shutil.which(compiler)
    if exe is None:
        raise BuildError(f"cannot build {name}: no {compiler!r} ({install_hint})")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{name}.tmp{os.getpid()}")
    argv = [exe, *flags, str(source), "-o", str(tmp)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"{compiler} failed to build {name}: {proc.stderr.strip()}")
    tmp.replace(out)
    return out
