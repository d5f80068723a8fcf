"""Running the host's Reservoir in a guest: the folders its Python needs, shared
read-only at the same paths (``Guest(shares=host_python.shares())``), so the guest
runs the very interpreter, packages and checkout that run the host, with no network
and nothing to install. Guest and host must be one architecture and the guest must
have the shared libraries the host's Python and extensions link to (the lab's image
is Debian 12, like the host; liburing2 is in its package list)."""

from __future__ import annotations

import sys
from pathlib import Path

import reservoir

__all__ = ["argv", "copy_argv", "module_argv", "shares"]

SYSTEM = Path("/usr")  # the guest has its own; sharing the host's would shadow it


def shares() -> list[Path]:
    """The checkout (or installed package), the virtual environment and the
    interpreter's own prefix, outermost only, none under /usr."""
    found = [
        Path(reservoir.__file__).resolve().parents[1],
        Path(sys.prefix).resolve(),
        Path(sys.base_prefix).resolve(),
    ]
    found = [p for p in found if not p.is_relative_to(SYSTEM)]
    return sorted({p for p in found if not any(p != q and p.is_relative_to(q) for q in found)})


def module_argv(module: str, *args: str) -> list[str]:
    """The command line of ``python -m MODULE ARGS`` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def argv(*args: str) -> list[str]:
    """The command line of ``reservoir ARGS`` with this interpreter."""
    return module_argv("reservoir", *args)


def copy_argv(*args: str) -> list[str]:
    """The command line of ``reservoir copy ARGS`` with this interpreter, loading only
    the copy's own CLI (:func:`reservoir.agent.transfer.cli.run`)."""
    return module_argv("reservoir.agent.transfer.cli", *args)
