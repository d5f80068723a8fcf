"""``reservoir agent tune``: apply a profile (``--profile``) or undo it (``--revert``).

Runs in the network namespace it is started in (``ip netns exec NS reservoir
agent tune ...`` tunes NS). Exit status: 0 everything applied (or already so),
3 something refused (the rest still applied), 2 a bad profile or command
line, 1 a state file that cannot be used.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from ._apply import apply_profile, format_table, revert
from ._host import SYSCTL_ROOT, Host
from ._persist import FILE_NAME, SYSCTL_D, PersistError, other_netns, persist, unpersist
from ._profile import PROFILE_DIR, Profile, ProfileError, load_profile
from ._state import STATE_DIR, StateError

EXIT_BAD_PROFILE = 2
EXIT_STATE = 1


def add_tune_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--profile",
        metavar="NAME|FILE",
        help=f"a profile name ({PROFILE_DIR}/NAME.toml) or a TOML file",
    )
    what.add_argument(
        "--revert",
        action="store_true",
        help="restore every value recorded before the first profile was applied",
    )
    parser.add_argument(
        "--interface",
        action="append",
        metavar="IF",
        help="tune this interface with the profile's [nic] settings (repeatable; "
        "replaces the profile's nic.interfaces)",
    )
    parser.add_argument(
        "--persist",
        action="store_true",
        help=f"with --profile: keep its sysctl values across reboots ({SYSCTL_D}/"
        f"{FILE_NAME}; --revert removes it)",
    )
    parser.add_argument(
        "--sysctl-dir",
        type=Path,
        default=SYSCTL_D,
        help=f"where --persist writes (default {SYSCTL_D})",
    )
    parser.add_argument("--dry-run", action="store_true", help="report, write nothing")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=STATE_DIR,
        help=f"where the original values are kept (default {STATE_DIR})",
    )


def run_tune(args: argparse.Namespace, host: Host | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        profile = None if args.revert else load_profile(args.profile)
    except ProfileError as e:
        print(f"reservoir agent tune: {e}", file=sys.stderr)
        return EXIT_BAD_PROFILE
    if args.revert and args.interface:
        print(
            "reservoir agent tune: --revert restores every recorded interface; "
            "--interface is ignored",
            file=sys.stderr,
        )
    own = host is None
    host = host or Host.local(SYSCTL_ROOT)
    try:
        if profile is None:
            report = revert(host, state_dir=args.state_dir, dry_run=args.dry_run)
        else:
            report = apply_profile(
                profile,
                host,
                interfaces=args.interface,
                state_dir=args.state_dir,
                dry_run=args.dry_run,
            )
    except StateError as e:
        print(f"reservoir agent tune: {e}", file=sys.stderr)
        return EXIT_STATE
    finally:
        if own:
            host.close()
    try:
        kept = _keep(args, profile, own_netns=not other_netns(host.netns))
    except PersistError as e:
        print(f"reservoir agent tune: {e}", file=sys.stderr)
        return EXIT_STATE
    if args.json:
        out.write(json.dumps({**report.to_dict(), "persisted": kept}, indent=1) + "\n")
    else:
        out.write(format_table(report))
        if kept:
            out.write(f"{kept}\n")
    return report.exit_code


def _keep(args: argparse.Namespace, profile: Profile | None, *, own_netns: bool) -> str | None:
    """``--persist`` (with a profile) or ``--revert``: what was done to the sysctl.d file."""
    if args.dry_run:
        return None
    if profile is None:
        removed = unpersist(args.sysctl_dir)
        return f"removed {removed}" if removed else None
    if not args.persist:
        return None
    path = persist(profile, args.sysctl_dir, own_netns=own_netns)
    return (
        f"kept across reboots: {path} (the sysctl values; NIC settings belong to the "
        "interface's configuration)"
    )
