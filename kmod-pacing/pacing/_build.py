"""Build of the sock_ops program ``bpf/cwnd_clamp.bpf.c``.

:func:`build` compiles the program with ``clang -target bpf`` into the cache folder
(``$RESERVOIR_CACHE``, ``$XDG_CACHE_HOME/reservoir`` or ``~/.cache/reservoir``) when the
object is missing or older than the source, and returns the object's path, like
``reservoir.lab.delayline.build``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from reservoir.lab.delayline import cache_dir
from reservoir.shipped import source

SOURCE = source("reservoir.pacing", "bpf", "cwnd_clamp.bpf.c")
OBJECT_NAME = "cwnd_clamp.bpf.o"
# The multiarch include dir holds asm/types.h, which linux/bpf.h needs under -target bpf.
CFLAGS = ("-O2", "-g", "-Wall", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu")


class BuildError(RuntimeError):
    """The BPF program could not be compiled."""


def build(out_dir: Path | None = None) -> Path:
    """Compile ``cwnd_clamp.bpf.c`` if needed; return the path of the object."""
    out = (out_dir or cache_dir()) / OBJECT_NAME
    if out.exists() and out.stat().st_mtime >= SOURCE.stat().st_mtime:
        return out
    clang = shutil.which("clang")
    if clang is None:
        raise BuildError("cannot build cwnd_clamp.bpf.o: no 'clang' (install clang and libbpf-dev)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{OBJECT_NAME}.tmp{os.getpid()}")
    argv = [clang, *CFLAGS, "-c", str(SOURCE), "-o", str(tmp)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"clang failed to build cwnd_clamp.bpf.o: {proc.stderr.strip()}")
    tmp.replace(out)
    return out
