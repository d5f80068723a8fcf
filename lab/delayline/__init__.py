"""The userspace delay line (``dline.c``) and its build.

:func:`build` compiles ``dline.c`` with ``cc`` into the cache folder
(:mod:`reservoir.common.build_cache`) when the binary is missing or older than the
source, and returns the binary's path.
"""

from __future__ import annotations

from pathlib import Path

from reservoir.common.build_cache import BuildError, compiled
from reservoir.shipped import source

__all__ = ["SOURCE", "BuildError", "build"]

SOURCE = source("reservoir.lab.delayline", "dline.c")
CFLAGS = ("-Wall", "-Wextra", "-Werror", "-O2", "-pthread")


def build(out_dir: Path | None = None) -> Path:
    """Compile ``dline`` if needed; return the path of the binary."""
    hint = "install build-essential"
    return compiled(
        SOURCE, "dline", compiler="cc", flags=CFLAGS, install_hint=hint, out_dir=out_dir
    )
