"""``reservoir lab vm ...``: build the guest image, run commands in a fresh guest.

::

    reservoir lab vm build                       # the cached image (built if missing)
    reservoir lab vm run -- uname -r             # boot a guest, run, power off
    reservoir lab vm run --package iperf3 -- iperf3 --version

``run`` boots a guest without a network (unless ``--project`` shares the checkout
read-only at /mnt/project), prints the command's output and exits with its status;
the guest is powered off and its overlay removed either way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from reservoir.lab.errors import LabError
from reservoir.lab.vm.guest import Guest, accelerator
from reservoir.lab.vm.image import LAB_PACKAGES, ensure_image

Sub = Any  # argparse's _SubParsersAction is private


def register(lsub: Sub) -> None:
    parser = lsub.add_parser("vm", help="guests with Debian's kernel under qemu")
    vsub = parser.add_subparsers(dest="vm_command", required=True, metavar="ACTION")
    p = vsub.add_parser("build", help="build (or find) the cached guest image")
    _packages(p)
    p.set_defaults(func=_build)
    p = vsub.add_parser("run", help="boot a guest, run a command in it, power it off")
    _packages(p)
    p.add_argument("--project", type=Path, help="share this folder read-only at /mnt/project")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds for the command")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    p.set_defaults(func=_run)


def _packages(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--package",
        action="append",
        default=[],
        help=f"a Debian package beyond the lab's set ({' '.join(LAB_PACKAGES)}); repeatable",
    )


def _build(args: argparse.Namespace) -> int:
    try:
        image = ensure_image(LAB_PACKAGES + tuple(args.package))
    except LabError as exc:
        print(f"reservoir lab vm build: {exc}", file=sys.stderr)
        return 1
    print(f"image: {image.folder} ({len(image.packages)} packages)")
    return 0


def _run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("reservoir lab vm run: give a command after --", file=sys.stderr)
        return 2
    try:
        image = ensure_image(LAB_PACKAGES + tuple(args.package))
        with Guest(image, "run", project=args.project) as guest:
            print(f"vm: booted in {guest.boot_seconds:.1f} s ({accelerator()}, {guest.kernel})")
            result = guest.run(command, timeout=args.timeout)
    except LabError as exc:
        print(f"reservoir lab vm run: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(result.out)
    sys.stderr.write(result.err)
    return result.rc
