"""Build of the sock_ops program ``bpf/cwnd_clamp.bpf.c``.

:func:`build` compiles the program with ``clang -target bpf`` into the cache folder
(:mod:`reservoir.common.build_cache`) when the object is missing or older than the
source, and returns the object's path.
"""

from __future__ import annotations

from pathlib import Path

from reservoir.common.build_cache import BuildError, compiled
from reservoir.shipped import source

__all__ = ["SOURCE", "BuildError", "build"]

SOURCE = source("reservoir.pacing", "bpf", "cwnd_clamp.bpf.c")
OBJECT_NAME = "cwnd_clamp.bpf.o"
# The multiarch include dir holds asm/types.h, which linux/bpf.h needs under -target bpf.
CFLAGS = ("-O2", "-g", "-Wall", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu", "-c")


def build(out_dir: Path | None = None) -> Path:
    """Compile ``cwnd_clamp.bpf.c`` if needed; return the path of the object."""
    hint = "install clang and libbpf-dev"
    return compiled(
        SOURCE, OBJECT_NAME, compiler="clang", flags=CFLAGS, install_hint=hint, out_dir=out_dir
    )
