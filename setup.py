"""The package list and the optional io_uring extension; pyproject.toml holds the rest.

pyproject.toml maps each import package onto its folder (``reservoir.agent`` is
agent/); :func:`packages` lists every package below those roots, so a new folder
with an ``__init__.py`` is packaged without being named anywhere.  A wheel (not an
editable install) needs the built dashboard, web/dist: :class:`BuildPy` refuses to
build one without it rather than ship a coordinator whose / answers 503.

The extension ``reservoir.agent.storage._uring`` is built only when a tiny program
using liburing compiles and links here (like liburing's configure or psutil's
setup.py probe the system).  When it does not, or when compiling the extension
itself fails, the install goes on without it and the storage engine falls back
to its thread-pool backend.  RESERVOIR_NO_URING=1 skips the extension on purpose.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
from typing import Any

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

EXT_NAME = "reservoir.agent.storage._uring"
EXT_SOURCES = ["agent/storage/_uring.c"]
WARNING_FLAGS = ["-Wall", "-Wextra"]

PROBE_PROGRAM = r"""
#include <liburing.h>
int main(void)
{
    struct io_uring ring;
    struct io_uring_sqe *sqe;
    if (io_uring_queue_init(2, &ring, 0) < 0)
        return 0; /* building is what is probed; running is checked at import */
    sqe = io_uring_get_sqe(&ring);
    io_uring_prep_read_fixed(sqe, 0, 0, 0, 0, 0);
    io_uring_prep_fallocate(sqe, 0, 0, 0, 0);
    io_uring_sqe_set_data64(sqe, 1);
    io_uring_register_eventfd(&ring, -1);
    io_uring_queue_exit(&ring);
    return 0;
}
"""


def log(msg: str) -> None:
    print(f"setup.py: {msg}", file=sys.stderr)


def pkg_config(*args: str) -> list[str] | None:
    """Flags from pkg-config for liburing, or None when pkg-config cannot tell."""
    exe = shutil.which("pkg-config")
    if exe is None:
        return None
    proc = subprocess.run([exe, *args, "liburing"], capture_output=True, text=True, check=False)
    return shlex.split(proc.stdout) if proc.returncode == 0 else None


def liburing_flags() -> tuple[list[str], list[str]]:
    """(compile flags, link flags) for liburing."""
    cflags = pkg_config("--cflags")
    libs = pkg_config("--libs")
    return (cflags or []), (libs or ["-luring"])


def probe_liburing(cflags: list[str], libs: list[str]) -> bool:
    """True if a program using the liburing calls we need compiles and links."""
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    with tempfile.TemporaryDirectory(prefix="reservoir-probe-") as tmp:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w", encoding="ascii") as f:
            f.write(PROBE_PROGRAM)
        cmd = [*cc, *cflags, src, "-o", os.path.join(tmp, "probe"), *libs]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as exc:
            log(f"cannot run the C compiler ({exc})")
            return False
    if proc.returncode != 0:
        log(f"liburing probe failed:\n{proc.stderr.strip()}")
    return proc.returncode == 0


def extensions() -> list[Extension]:
    if os.environ.get("RESERVOIR_NO_URING"):
        log("RESERVOIR_NO_URING set: building without the io_uring extension")
        return []
    cflags, libs = liburing_flags()
    if not probe_liburing(cflags, libs):
        log("liburing not usable: building without the io_uring extension (threads backend)")
        return []
    return [
        Extension(
            EXT_NAME,
            sources=EXT_SOURCES,
            extra_compile_args=[*cflags, *WARNING_FLAGS],
            extra_link_args=libs,
        )
    ]


class OptionalBuildExt(build_ext):
    """build_ext whose failure leaves the package installable (threads backend)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # the extension is optional by design
            log(f"building the io_uring extension failed ({exc}); threads backend only")

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            log(f"building {ext.name} failed ({exc}); threads backend only")


def package_dirs() -> dict[str, str]:
    """pyproject.toml's [tool.setuptools.package-dir]: import package -> folder."""
    with open("pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["tool"]["setuptools"]["package-dir"])


def packages() -> list[str]:
    """Every package under the mapped roots (the roots themselves included)."""
    found = []
    for name, folder in package_dirs().items():
        found.append(name)
        found.extend(f"{name}.{sub}" for sub in find_packages(folder, exclude=SKIP))
    return sorted(set(found))


class BuildPy(build_py):
    """build_py that will not make a wheel without the dashboard it serves."""

    def run(self) -> None:
        if not getattr(self, "editable_mode", False) and not os.path.isfile(DASHBOARD):
            raise SystemExit(
                f"setup.py: {DASHBOARD} is missing: build the dashboard first "
                "(make install, or npm ci && npm run build in web/)"
            )
        super().run()


DASHBOARD = "web/dist/index.html"
SKIP = ["node_modules", "node_modules.*"]

setup(
    packages=packages(),
    ext_modules=extensions(),
    cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPy},
)
