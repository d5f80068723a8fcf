"""The userspace delay line (``dline.c``) and its build.

:func:`build` compiles ``dline.c`` with ``cc`` into a cache folder when the
binary is missing or older than the source, and returns the binary's path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from reservoir.shipped import source

SOURCE = source("reservoir.lab.delayline", "dline.c")
CFLAGS = ("-Wall", "-Wextra", "-Werror", "-O2", "-pthread")


class BuildError(RuntimeError):
    """The delay line could not be compiled."""


def cache_dir() -> Path:
    """``$RESERVOIR_CACHE`` or ``$XDG_CACHE_HOME/reservoir`` or ``~/.cache/reservoir``."""
    env = os.environ.get("RESERVOIR_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "reservoir"


def build(out_dir: Path | None = None) -> Path:
    """Compile ``dline`` if needed; return the path of the binary."""
    out = (out_dir or cache_dir()) / "dline"
    if out.exists() and out.stat().st_mtime >= SOURCE.stat().st_mtime:
        return out
    cc = shutil.which("cc")
    if cc is None:
        raise BuildError("cannot build dline: no C compiler 'cc' (install build-essential)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"dline.tmp{os.getpid()}")
    proc = subprocess.run(
        [cc, *CFLAGS, "-o", str(tmp), str(SOURCE)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"cc failed to build dline: {proc.stderr.strip()}")
    tmp.replace(out)
    return out
