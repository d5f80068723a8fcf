"""``reservoir target ...``: serve a target, and edit its configuration file.

Quick target::

    reservoir target serve --portal 127.0.0.1:3260 --iqn iqn.2026-11.org.reservoir:t1 \\
        --lun /srv/disk.img [--chap USER:SECRET] [--mutual-chap USER:SECRET] [--allow IQN]

Configured target: ``reservoir target serve --config target.toml``; the file is
edited with ``reservoir target add|remove|lun|acl|chap|portal --config FILE``
and saved atomically.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reservoir.agent.target import config as cfg

log = logging.getLogger("reservoir.target")

Sub = Any  # argparse's _SubParsersAction is private


def register(sub: Sub) -> None:
    parser = sub.add_parser("target", help="the builtin iSCSI target")
    tsub = parser.add_subparsers(dest="target_command", required=True, metavar="ACTION")
    _register_serve(tsub)
    _register_edit(tsub)


# ---------------------------------------------------------------- serve


def _register_serve(tsub: Sub) -> None:
    p = tsub.add_parser("serve", help="serve targets until interrupted")
    p.add_argument("--config", help="TOML configuration file")
    p.add_argument("--portal", action="append", default=[], help="HOST:PORT (repeatable)")
    p.add_argument("--iqn", help="target name for a quick target")
    p.add_argument("--lun", action="append", default=[], help="backing file or device (repeatable)")
    p.add_argument("--chap", help="USER:SECRET the initiator must log in with")
    p.add_argument("--mutual-chap", help="USER:SECRET the target answers mutual CHAP with")
    p.add_argument(
        "--allow", action="append", default=[], help="initiator IQN allowed (repeatable)"
    )
    p.add_argument("--read-only", action="store_true", help="export the LUNs read-only")
    p.add_argument(
        "--direct", action="store_true", help="O_DIRECT for aligned I/O (default: page cache)"
    )
    p.add_argument("--nop-interval", type=float, default=30.0, help="NOP-In ping interval, s")
    p.add_argument(
        "--mptcp",
        action="store_true",
        help="listen with MPTCP (plain TCP initiators still work); announce the extra "
        "addresses with `ip mptcp endpoint add ADDR dev DEV signal`",
    )
    p.set_defaults(func=_serve)


def quick_config(args: argparse.Namespace) -> cfg.TargetConfig:
    if not args.iqn or not args.lun:
        raise cfg.ConfigError("a quick target needs --iqn and at least one --lun (or --config)")
    target = cfg.Target(
        iqn=args.iqn,
        luns=[
            cfg.Lun(i, str(Path(p).resolve()), args.read_only, args.direct)
            for i, p in enumerate(args.lun)
        ],
        allow=list(args.allow),
        chap=cfg.parse_chap(args.chap, "--chap") if args.chap else None,
        mutual_chap=cfg.parse_chap(args.mutual_chap, "--mutual-chap") if args.mutual_chap else None,
    )
    portals = [cfg.parse_portal(p) for p in args.portal] or [("0.0.0.0", cfg.DEFAULT_PORT)]
    config = cfg.TargetConfig(portals=portals, targets=[target])
    cfg.validate(config)
    return config


def _serve(args: argparse.Namespace) -> int:
    try:
        if args.config:
            config = cfg.load(args.config)
            if args.portal:
                config.portals = [cfg.parse_portal(p) for p in args.portal]
        else:
            config = quick_config(args)
    except cfg.ConfigError as exc:
        print(f"reservoir target serve: {exc}", file=sys.stderr)
        return 2
    return _run_loop(lambda: serve(config, nop_interval=args.nop_interval, mptcp=args.mptcp))


def _run_loop(main: Callable[[], Any]) -> int:
    try:
        import uvloop

        runner: Callable[[Any], int] = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    try:
        rc: int = runner(main())
    except OSError as exc:
        print(f"reservoir target serve: {exc}", file=sys.stderr)
        return 1
    return rc


async def serve(
    config: cfg.TargetConfig, *, nop_interval: float = 30.0, mptcp: bool = False
) -> int:
    from reservoir.agent.storage import StorageError
    from reservoir.agent.target.server import TargetServer

    server = TargetServer(config, nop_interval=nop_interval, mptcp=mptcp)
    _tune_gc()
    try:
        await server.start()
    except StorageError as exc:
        print(f"reservoir target serve: {exc}", file=sys.stderr)
        await server.stop(grace=0)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"ready: {', '.join(cfg.format_portal(h, p) for h, p in config.portals)}", flush=True)
    await stop.wait()
    log.info("stopping")
    await server.stop()
    return 0


def _tune_gc() -> None:
    """Every command allocates a few short-lived objects; the default gen-0
    threshold (700) runs the cycle collector thousands of times a second.
    Start-up objects are frozen out of collection and gen 0 is made larger."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


# ---------------------------------------------------------------- config editing


def _register_edit(tsub: Sub) -> None:
    def cmd(
        name: str, help_: str, func: Callable[[cfg.TargetConfig, argparse.Namespace], str]
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = tsub.add_parser(name, help=help_)
        p.add_argument(
            "--config", required=True, help="TOML configuration file (created if absent)"
        )
        p.set_defaults(func=lambda a: _edit(a, func))
        return p

    cmd("show", "print the configuration (secrets masked)", _show)
    p = cmd("add", "add a target", _add_target)
    p.add_argument("iqn")
    p.add_argument("--alias")
    p = cmd("remove", "remove a target", _remove_target)
    p.add_argument("iqn")
    p = cmd("lun", "add or remove a LUN", _lun)
    p.add_argument("op", choices=["add", "remove"])
    p.add_argument("iqn")
    p.add_argument("path_or_id", help="backing path (add) or LUN id (remove)")
    p.add_argument("--id", type=int, help="LUN id (add; default: next free)")
    p.add_argument("--read-only", action="store_true")
    p.add_argument("--direct", action="store_true", help="O_DIRECT for aligned I/O")
    p = cmd("acl", "allow or disallow an initiator", _acl)
    p.add_argument("op", choices=["add", "remove"])
    p.add_argument("iqn")
    p.add_argument("initiator")
    p = cmd("chap", "set or clear CHAP secrets", _chap)
    p.add_argument("op", choices=["set", "clear"])
    p.add_argument("iqn")
    p.add_argument("--user-secret", help="USER:SECRET the initiator logs in with")
    p.add_argument("--mutual", help="USER:SECRET for mutual CHAP")
    p = cmd("portal", "add or remove a portal", _portal)
    p.add_argument("op", choices=["add", "remove"])
    p.add_argument("portal")


def _edit(
    args: argparse.Namespace, func: Callable[[cfg.TargetConfig, argparse.Namespace], str]
) -> int:
    path = Path(args.config)
    try:
        config = cfg.load(path) if path.exists() else cfg.TargetConfig()
        message = func(config, args)
        if func is not _show:
            if not config.portals:  # a file being built: default to all addresses
                config.portals = [("0.0.0.0", cfg.DEFAULT_PORT)]
            cfg.save(config, path)
    except cfg.ConfigError as exc:
        print(f"reservoir target: {exc}", file=sys.stderr)
        return 2
    print(message)
    return 0


def _show(config: cfg.TargetConfig, args: argparse.Namespace) -> str:
    lines = [f"portals: {', '.join(cfg.format_portal(h, p) for h, p in config.portals)}"]
    for t in config.targets:
        lines.append(f"target {t.iqn}" + (f" ({t.alias})" if t.alias else ""))
        for lun in t.luns:
            lines.append(f"  lun {lun.id}: {lun.path}{' (read-only)' if lun.read_only else ''}")
        lines.append(f"  allow: {', '.join(t.allow) or 'everyone'}")
        lines.append(f"  chap: {t.chap.user + ':***' if t.chap else 'none'}")
        lines.append(f"  mutual chap: {t.mutual_chap.user + ':***' if t.mutual_chap else 'none'}")
    return "\n".join(lines)


def _add_target(config: cfg.TargetConfig, args: argparse.Namespace) -> str:
    if config.target(args.iqn):
        raise cfg.ConfigError(f"target {args.iqn!r} exists already")
    config.targets.append(cfg.Target(iqn=args.iqn, alias=args.alias))
    return f"added target {args.iqn}"


def _remove_target(config: cfg.TargetConfig, args: argparse.Namespace) -> str:
    config.targets.remove(config.require_target(args.iqn))
    return f"removed target {args.iqn}"


def _lun(config: cfg.TargetConfig, args: argparse.Namespace) -> str:
    target = config.require_target(args.iqn)
    if args.op == "remove":
        lun = target.lun(_int(args.path_or_id, "LUN id"))
        if lun is None:
            raise cfg.ConfigError(f"target {args.iqn!r} has no LUN {args.path_or_id}")
        target.luns.remove(lun)
        return f"removed LUN {lun.id} from {args.iqn}"
    path = Path(args.path_or_id)
    if not path.exists():
        raise cfg.ConfigError(f"{path}: no such file or device")
    lun_id = args.id if args.id is not None else _next_lun(target)
    if target.lun(lun_id):
        raise cfg.ConfigError(f"target {args.iqn!r} has a LUN {lun_id} already")
    target.luns.append(cfg.Lun(lun_id, str(path.resolve()), args.read_only, args.direct))
    return f"added LUN {lun_id} ({path}) to {args.iqn}"


def _int(text: str, what: str) -> int:
    if not text.isdigit():
        raise cfg.ConfigError(f"{what} must be a number, not {text!r}")
    return int(text)


def _next_lun(target: cfg.Target) -> int:
    used = {lun.id for lun in target.luns}
    return next(i for i in range(16384) if i not in used)


def _acl(config: cfg.TargetConfig, args: argparse.Namespace) -> str:
    target = config.require_target(args.iqn)
    if args.op == "add":
        if args.initiator not in target.allow:
            target.allow.append(args.initiator)
        return f"{args.initiator} may log in to {args.iqn}"
    if args.initiator not in target.allow:
        raise cfg.ConfigError(f"{args.initiator} is not in the ACL of {args.iqn}")
    target.allow.remove(args.initiator)
    return f"{args.initiator} removed from the ACL of {args.iqn}"


def _chap(config: cfg.TargetConfig, args: argparse.Namespace) -> str:
    target = config.require_target(args.iqn)
    if args.op == "clear":
        target.chap = target.mutual_chap = None
        return f"CHAP cleared on {args.iqn}"
    if not args.user_secret:
        raise cfg.ConfigError("chap set needs --user-secret USER:SECRET")
    target.chap = cfg.parse_chap(args.user_secret, "--user-secret")
    if args.mutual:
        target.mutual_chap = cfg.parse_chap(args.mutual, "--mutual")
    return f"CHAP set on {args.iqn} (user {target.chap.user})"


def _portal(config: cfg.TargetConfig, args: argparse.Namespace) -> str:
    portal = cfg.parse_portal(args.portal)
    if args.op == "add":
        if portal not in config.portals:
            config.portals.append(portal)
        return f"portal {cfg.format_portal(*portal)} added"
    with contextlib.suppress(ValueError):
        config.portals.remove(portal)
        return f"portal {cfg.format_portal(*portal)} removed"
    raise cfg.ConfigError(f"no portal {args.portal}")
