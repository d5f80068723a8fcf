"""``reservoir target lio ...``: the same TOML as ``reservoir target serve``, served by
LIO (the kernel's target) instead of the builtin one (see :mod:`.lio`)::

    reservoir target lio apply --config target.toml     # provision, then save
    reservoir target lio clear --config target.toml     # remove what apply made
    reservoir target lio save [--save-file F]           # targetcli saveconfig
    reservoir target lio restore [--save-file F] [--clear-existing]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from reservoir.agent.target import config as cfg
from reservoir.agent.target import lio
from reservoir.agent.target.errors import TargetError

Sub = Any  # argparse's _SubParsersAction is private
Action = Callable[[argparse.Namespace], list[str]]


def register(tsub: Sub) -> None:
    parser = tsub.add_parser("lio", help="serve the configuration with LIO, the kernel's target")
    _add_actions(parser)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m reservoir.agent.target.lio_cli ACTION``: the same actions, loading
    only the target's modules (quicker where Python starts slowly: an emulated guest)."""
    parser = argparse.ArgumentParser(prog="reservoir target lio")
    _add_actions(parser)
    args = parser.parse_args(argv)
    rc: int = args.func(args)
    return rc


def _add_actions(parser: argparse.ArgumentParser) -> None:
    lsub = parser.add_subparsers(dest="lio_command", required=True, metavar="ACTION")
    p = _command(lsub, "apply", "provision LIO from a target file, then save", _apply)
    _config_argument(p)
    _save_arguments(p)
    p.add_argument("--no-save", action="store_true", help="do not save LIO's configuration")
    p = _command(lsub, "clear", "remove from LIO what apply made of a target file", _clear)
    _config_argument(p)
    _save_arguments(p)
    p.add_argument("--no-save", action="store_true", help="do not save LIO's configuration")
    p = _command(lsub, "save", "save LIO's whole configuration (saveconfig JSON)", _save)
    _save_arguments(p)
    p = _command(lsub, "restore", "restore a saved LIO configuration", _restore)
    _save_arguments(p)
    p.add_argument(
        "--clear-existing",
        action="store_true",
        help="remove everything in LIO first (otherwise refused where a name exists)",
    )


def _command(lsub: Sub, name: str, help_: str, func: Action) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = lsub.add_parser(name, help=help_)
    p.set_defaults(func=lambda args: _run(name, func, args))
    return p


def _config_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="the target file (reservoir target's TOML)")


def _save_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--save-file", type=Path, help="saveconfig JSON (default: the one LIO restores at boot)"
    )


def _run(name: str, func: Action, args: argparse.Namespace) -> int:
    try:
        lines = func(args)
    except TargetError as exc:
        print(f"reservoir target lio {name}: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def _config(args: argparse.Namespace) -> cfg.TargetConfig:
    config = cfg.load(args.config)
    cfg.check_servable(config)
    return config


def _apply(args: argparse.Namespace) -> list[str]:
    report = lio.apply(_config(args), args.save_file, saving=not args.no_save)
    lines = [f"target {name}" for name in report.targets]
    lines += [f"portal {portal}" for portal in report.portals]
    lines += [f"backstore {line}" for line in report.backstores]
    lines += [f"access {line}" for line in report.access]
    lines.append(f"saved to {report.saved}" if report.saved else "not saved (--no-save)")
    return lines


def _clear(args: argparse.Namespace) -> list[str]:
    removed = lio.clear(_config(args))
    lines = [f"removed {name}" for name in removed] or ["nothing of this file is in LIO"]
    if not args.no_save:
        lines.append(f"saved to {lio.save(args.save_file)}")
    return lines


def _save(args: argparse.Namespace) -> list[str]:
    return [f"saved to {lio.save(args.save_file)}"]


def _restore(args: argparse.Namespace) -> list[str]:
    errors = lio.restore(args.save_file, clear_existing=args.clear_existing)
    return [f"restored, with a problem: {e}" for e in errors] or ["restored"]


if __name__ == "__main__":
    sys.exit(main())
