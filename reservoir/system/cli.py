"""``reservoir system install-units [UNIT ...] [--unit-dir DIR] [--reservoir PATH]
[--dry-run] [--remove]``: Reservoir's systemd units on this host.

UNIT is ``agent``, ``target`` or ``coordinator`` (default: all three). The units run
this installation's ``reservoir`` (the script beside the running interpreter, or
``--reservoir PATH``). Nothing is started: the command prints the ``systemctl`` lines
to run next. Exit status 0 done, 1 a file that is not Reservoir's or cannot be
written (nothing was changed), 2 a bad command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from ._units import (
    UNIT_DIR,
    UNITS,
    Outcome,
    hidden_from_units,
    install_units,
    remove_units,
    reservoir_executable,
)

__all__ = ["register", "run_install_units"]

Sub = Any  # argparse's _SubParsersAction is private
PROG = "reservoir system install-units"


def register(sub: Sub) -> None:
    parser = sub.add_parser("system", help="this host's service manager: systemd units")
    actions = parser.add_subparsers(dest="system_command", required=True, metavar="ACTION")
    p = actions.add_parser(
        "install-units",
        help="write (or --remove) the systemd units of the agent, the target, the coordinator",
        description="Write Reservoir's systemd units, running this installation's "
        "reservoir; a unit file Reservoir did not write is never replaced or removed.",
    )
    p.add_argument("units", nargs="*", metavar="UNIT", help=f"{', '.join(UNITS)} (default: all)")
    p.add_argument(
        "--unit-dir",
        type=Path,
        default=UNIT_DIR,
        help=f"where the unit files go (default {UNIT_DIR})",
    )
    p.add_argument(
        "--reservoir",
        type=Path,
        metavar="PATH",
        help="the reservoir script the units run (default: the one beside this Python)",
    )
    p.add_argument("--remove", action="store_true", help="remove the units instead")
    p.add_argument(
        "--dry-run", action="store_true", help="print what would be written, write nothing"
    )
    p.set_defaults(func=run_install_units)


def run_install_units(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    unknown = sorted(set(args.units) - set(UNITS))
    if unknown:
        print(f"{PROG}: unknown unit {', '.join(unknown)} (one of {', '.join(UNITS)})",
              file=sys.stderr)  # fmt: skip
        return 2
    names = list(dict.fromkeys(args.units)) or list(UNITS)
    if args.remove:
        outcomes = remove_units(names, args.unit_dir, dry_run=args.dry_run)
    else:
        executable = (args.reservoir or reservoir_executable()).absolute()
        outcomes = install_units(names, args.unit_dir, executable, dry_run=args.dry_run)
        _warn_hidden(executable)
    out.write(_report(outcomes, dry_run=args.dry_run))
    if not args.dry_run:
        out.write(_next_steps(outcomes, removed=args.remove))
    return 0


def _warn_hidden(executable: Path) -> None:
    """A warning for each file the services need but cannot see."""
    for path in hidden_from_units(executable):
        print(
            f"{PROG}: warning: the units hide {path} from their services (ProtectHome=, "
            "PrivateTmp=), which then cannot start: install Reservoir outside /home, /root "
            "and /tmp (a checkout in /opt with Debian's python3)",
            file=sys.stderr,
        )


def _report(outcomes: list[Outcome], *, dry_run: bool) -> str:
    """One line per unit file; in a dry run, each text that would be written too."""
    lines = []
    for o in outcomes:
        lines.append(f"{o.path}: {'would be ' if dry_run else ''}{o.action}")
        if dry_run and o.text and o.action != "unchanged":
            lines.append(o.text.rstrip("\n"))
    return "\n".join(lines) + "\n"


def _next_steps(outcomes: list[Outcome], *, removed: bool) -> str:
    """The systemctl lines that make systemd act on the files (never run here)."""
    changed = [o.path.name for o in outcomes if o.action not in ("unchanged", "absent")]
    if not changed:
        return ""
    if removed:  # stopped and disabled before, with systemctl disable --now
        return "next: systemctl daemon-reload\n"
    return (
        "next, with each unit's configuration file in /etc/reservoir/ (its ExecStart "
        "names it):\n"
        "  systemctl daemon-reload\n"
        f"  systemctl enable --now {' '.join(changed)}\n"
    )
