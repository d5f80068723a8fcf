"""``reservoir lab ...``: bring a lab network up, take it down, cut and restore links;
guests of the VM lab (``reservoir lab vm``, :mod:`reservoir.lab.vm.cli`).

::

    reservoir lab up config/lab/lfn-2x500m-100ms.toml
    reservoir lab link config/lab/lfn-2x500m-100ms.toml l1 down
    reservoir lab down config/lab/lfn-2x500m-100ms.toml

``up`` leaves the lab running and records what it created (namespaces, delay
line PIDs) in a state file under ``/run/reservoir-lab/state/``, keyed by the
spec's absolute path, so ``down`` and ``link`` in another process act on
exactly that lab.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import sys
from pathlib import Path
from typing import Any

from reservoir.lab import netns
from reservoir.lab.errors import LabError
from reservoir.lab.network import RUN_ROOT, Lab, LabState
from reservoir.lab.spec import SpecError, load
from reservoir.lab.vm import cli as vm_cli

Sub = Any  # argparse's _SubParsersAction is private


def register(sub: Sub) -> None:
    parser = sub.add_parser("lab", help="lab networks: namespaces, links, delay lines")
    lsub = parser.add_subparsers(dest="lab_command", required=True, metavar="ACTION")
    p = lsub.add_parser("up", help="create the lab of a spec and leave it running")
    p.add_argument("spec", type=Path, help="lab spec (TOML)")
    p.set_defaults(func=_up)
    p = lsub.add_parser("down", help="remove the lab that 'up' created for a spec")
    p.add_argument("spec", type=Path, help="lab spec (TOML)")
    p.set_defaults(func=_down)
    p = lsub.add_parser("link", help="cut or restore a link of a running lab")
    p.add_argument("spec", type=Path, help="lab spec (TOML)")
    p.add_argument("link", help="link name")
    p.add_argument("state", choices=["down", "up"], help="down cuts the link, up restores it")
    p.set_defaults(func=_link)
    vm_cli.register(lsub)


def state_path(spec: Path) -> Path:
    """Where ``up`` records the lab of ``spec``."""
    key = hashlib.sha256(str(spec.resolve()).encode()).hexdigest()[:12]
    return RUN_ROOT / "state" / f"{spec.stem}-{key}.json"


def _attach(spec_path: Path) -> Lab:
    path = state_path(spec_path)
    if not path.exists():
        raise LabError(f"no running lab for {spec_path} (no {path}); run 'reservoir lab up' first")
    return Lab(load(spec_path), LabState.from_json(path.read_text()))


def _up(args: argparse.Namespace) -> int:
    return _guard(_do_up, args)


def _do_up(args: argparse.Namespace) -> None:
    spec = load(args.spec)
    path = state_path(args.spec)
    if path.exists():
        state = LabState.from_json(path.read_text())
        if any(netns.exists(ns) for ns in state.namespaces):
            raise LabError(f"a lab for {args.spec} is already up ({state.prefix}); run down first")
    lab = Lab(spec).up()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(lab.state.to_json())
    # The lab outlives this process: forget the atexit teardown that up() registered.

    atexit.unregister(lab.down)
    hosts = ", ".join(f"{h.name}={lab.ns(h.name)}" for h in spec.hosts)
    print(f"lab {lab.prefix} up: {hosts}; state in {path}")


def _down(args: argparse.Namespace) -> int:
    return _guard(_do_down, args)


def _do_down(args: argparse.Namespace) -> None:
    lab = _attach(args.spec)
    lab.down()
    state_path(args.spec).unlink(missing_ok=True)
    print(f"lab {lab.prefix} down")


def _link(args: argparse.Namespace) -> int:
    return _guard(_do_link, args)


def _do_link(args: argparse.Namespace) -> None:
    lab = _attach(args.spec)
    if args.state == "down":
        lab.link_down(args.link)
    else:
        lab.link_up(args.link)
    print(f"lab {lab.prefix}: link {args.link} {args.state}")


def _guard(action: Any, args: argparse.Namespace) -> int:
    try:
        action(args)
    except (LabError, SpecError) as e:
        print(f"reservoir lab: {e}", file=sys.stderr)
        return 1
    return 0
