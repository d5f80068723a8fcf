"""``reservoir target ...``: serve a target, and edit its configuration file.

Quick target::

    reservoir target serve --portal 127.0.0.1:3260 --iqn iqn.2026-11.org.reservoir:t1 \\
        --lun /srv/disk.img --allow IQN | --chap USER --chap-secret-file PATH | --open

A target admits no one unless told who: ``--allow`` (initiator names), ``--chap``
(``USER:SECRET``, or ``USER`` with ``--chap-secret-file``/``--chap-secret-env``),
or ``--open`` for every initiator without CHAP (logged as a warning).

Configured target: ``reservoir target serve --config target.toml``; the file is
edited with ``reservoir target add|remove|lun|acl|chap|open|portal --config FILE``,
which keeps its comments and layout, refuses to rewrite a file it cannot fully
read, and saves atomically.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

from reservoir.agent.iscsi.chap import ChapError
from reservoir.agent.iscsi.chap_options import add_chap_arguments, chap_credentials
from reservoir.agent.target import config as cfg
from reservoir.agent.target import lio_cli
from reservoir.agent.target.config_document import ConfigDocument

log = logging.getLogger("reservoir.target")

Sub = Any  # argparse's _SubParsersAction is private


def register(sub: Sub) -> None:
    parser = sub.add_parser("target", help="the builtin iSCSI target")
    tsub = parser.add_subparsers(dest="target_command", required=True, metavar="ACTION")
    _register_serve(tsub)
    _register_edit(tsub)
    lio_cli.register(tsub)


def _add_cache_arguments(p: argparse.ArgumentParser) -> None:
    """Where a LUN's I/O goes: the page cache, or storage with O_DIRECT."""
    p.add_argument(
        "--direct", action="store_true", help="O_DIRECT for every aligned request (no page cache)"
    )
    p.add_argument(
        "--cached-bulk-writes",
        action="store_true",
        help="write everything through the page cache (default: aligned writes of 256 KiB "
        "and more, such as a copy's data, go straight to storage with O_DIRECT)",
    )


def _add_chap_arguments(p: argparse.ArgumentParser, *aliases: str) -> None:
    """--chap and --mutual-chap with their secret sources (``aliases``: older names)."""
    add_chap_arguments(p, "--chap", "the initiator must log in with", *aliases[:1])
    add_chap_arguments(p, "--mutual-chap", "the target answers mutual CHAP with", *aliases[1:])


def _chap_option(args: argparse.Namespace, name: str) -> cfg.Chap | None:
    try:
        credentials = chap_credentials(args, name, log)
    except ChapError as exc:
        raise cfg.ConfigError(str(exc)) from None
    return None if credentials is None else cfg.Chap(*credentials)


# ---------------------------------------------------------------- serve


def _register_serve(tsub: Sub) -> None:
    p = tsub.add_parser("serve", help="serve targets until interrupted")
    p.add_argument("--config", help="TOML configuration file")
    p.add_argument("--portal", action="append", default=[], help="HOST:PORT (repeatable)")
    p.add_argument("--iqn", help="target name for a quick target")
    p.add_argument("--lun", action="append", default=[], help="backing file or device (repeatable)")
    _add_chap_arguments(p)
    p.add_argument(
        "--allow", action="append", default=[], help="initiator IQN allowed (repeatable)"
    )
    p.add_argument(
        "--open",
        action="store_true",
        help="admit every initiator, without ACL or CHAP (logged as a warning)",
    )
    p.add_argument("--read-only", action="store_true", help="export the LUNs read-only")
    _add_cache_arguments(p)
    p.add_argument("--nop-interval", type=float, default=30.0, help="NOP-In ping interval, s")
    p.add_argument(
        "--mptcp",
        action="store_true",
        help="listen with MPTCP (plain TCP initiators still work); announce the extra "
        "addresses with `ip mptcp endpoint add ADDR dev DEV signal`",
    )
    p.set_defaults(func=_serve)


def _bulk_writes(args: argparse.Namespace) -> cfg.BulkWrites:
    return "cached" if args.cached_bulk_writes else "direct"


def quick_config(args: argparse.Namespace) -> cfg.TargetConfig:
    if not args.iqn or not args.lun:
        raise cfg.ConfigError("a quick target needs --iqn and at least one --lun (or --config)")
    target = cfg.Target(
        iqn=args.iqn,
        luns=[
            cfg.Lun(i, str(Path(p).resolve()), args.read_only, args.direct, _bulk_writes(args))
            for i, p in enumerate(args.lun)
        ],
        allow=list(args.allow),
        chap=_chap_option(args, "chap"),
        mutual_chap=_chap_option(args, "mutual_chap"),
        open=args.open,
    )
    if not (target.open or target.allow or target.chap):
        raise cfg.ConfigError(
            f"target {args.iqn} would admit no one: give --allow IQN, --chap USER "
            "(with --chap-secret-file or --chap-secret-env), or --open to admit every "
            "initiator without CHAP"
        )
    portals = [cfg.parse_portal(p) for p in args.portal]
    if not portals:
        portals = [("0.0.0.0", cfg.DEFAULT_PORT)]
        log.warning("no --portal: listening on %s", cfg.describe_portal(*portals[0]))
    config = cfg.TargetConfig(portals=portals, targets=[target])
    cfg.validate(config)
    cfg.check_servable(config)
    return config


_QUICK_ONLY = (
    "iqn",
    "lun",
    "allow",
    "open",
    "chap",
    "chap_secret_file",
    "chap_secret_env",
    "mutual_chap",
    "mutual_chap_secret_file",
    "mutual_chap_secret_env",
    "read_only",
    "direct",
    "cached_bulk_writes",
)


def file_config(args: argparse.Namespace) -> cfg.TargetConfig:
    """The --config file, its portals replaced by --portal if given, checked to be served.
    The quick target's options are refused with it rather than ignored."""
    for name in _QUICK_ONLY:
        if getattr(args, name):
            option = "--" + name.replace("_", "-")
            raise cfg.ConfigError(
                f"{option} is for a quick target; with --config, say it in the file"
            )
    config = cfg.load_for_editing(args.config)
    if args.portal:
        config.portals = [cfg.parse_portal(p) for p in args.portal]
    try:
        cfg.check_servable(config)
    except cfg.ConfigError as exc:
        raise cfg.ConfigError(f"{args.config}: {exc}") from None
    return config


def _serve(args: argparse.Namespace) -> int:
    try:
        config = file_config(args) if args.config else quick_config(args)
    except cfg.ConfigError as exc:
        print(f"reservoir target serve: {exc}", file=sys.stderr)
        return 2
    return _run_loop(lambda: serve(config, nop_interval=args.nop_interval, mptcp=args.mptcp))


def _run_loop(main: Callable[[], Any]) -> int:
    try:
        rc: int = uvloop.run(main())
    except OSError as exc:
        print(f"reservoir target serve: {exc}", file=sys.stderr)
        return 1
    return rc


async def serve(
    config: cfg.TargetConfig, *, nop_interval: float = 30.0, mptcp: bool = False
) -> int:
    # Lazy: the target's server loads for `target serve` only (every command parses here).
    from reservoir.agent.storage import StorageError  # noqa: PLC0415
    from reservoir.agent.target.server import TargetServer  # noqa: PLC0415

    server = TargetServer(config, nop_interval=nop_interval, mptcp=mptcp)
    _tune_gc()
    try:
        await server.start()
    except (StorageError, cfg.ConfigError) as exc:  # a LUN that cannot be opened: ConfigError
        print(f"reservoir target serve: {exc}", file=sys.stderr)
        await server.stop(grace=0)
        return 2 if isinstance(exc, cfg.ConfigError) else 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"ready: {', '.join(cfg.describe_portal(h, p) for h, p in config.portals)}", flush=True)
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

Edit = Callable[[ConfigDocument, argparse.Namespace], str]


def _register_edit(tsub: Sub) -> None:
    def cmd(name: str, help_: str, func: Edit) -> argparse.ArgumentParser:
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
    p.add_argument("--open", action="store_true", help="admit every initiator, without ACL or CHAP")
    p = cmd("remove", "remove a target", _remove_target)
    p.add_argument("iqn")
    p = cmd("lun", "add or remove a LUN", _lun)
    p.add_argument("op", choices=["add", "remove"])
    p.add_argument("iqn")
    p.add_argument("path_or_id", help="backing path (add) or LUN id (remove)")
    p.add_argument("--id", type=int, help="LUN id (add; default: next free)")
    p.add_argument("--read-only", action="store_true")
    _add_cache_arguments(p)
    p = cmd("acl", "allow or disallow an initiator", _acl)
    p.add_argument("op", choices=["add", "remove"])
    p.add_argument("iqn")
    p.add_argument("initiator")
    p = cmd("chap", "set or clear CHAP secrets", _chap)
    p.add_argument("op", choices=["set", "clear"])
    p.add_argument("iqn")
    _add_chap_arguments(p, "--user-secret", "--mutual")
    p = cmd("open", "admit every initiator without ACL or CHAP (set), or stop (clear)", _open)
    p.add_argument("op", choices=["set", "clear"])
    p.add_argument("iqn")
    p = cmd("portal", "add or remove a portal", _portal)
    p.add_argument("op", choices=["add", "remove"])
    p.add_argument("portal")


def _edit(args: argparse.Namespace, func: Edit) -> int:
    try:
        document = ConfigDocument.read(args.config)
        message = func(document, args)
        if func is not _show:
            document.save()
    except cfg.ConfigError as exc:
        print(f"reservoir target: {exc}", file=sys.stderr)
        return 2
    print(message)
    return 0


def _show(document: ConfigDocument, args: argparse.Namespace) -> str:
    config = document.config
    portals = ", ".join(cfg.describe_portal(h, p) for h, p in config.portals)
    lines = [f"portals: {portals or 'none'}"]
    for t in config.targets:
        lines.append(f"target {t.iqn}" + (f" ({t.alias})" if t.alias else ""))
        for lun in t.luns:
            lines.append(f"  lun {lun.id}: {lun.path}{' (read-only)' if lun.read_only else ''}")
        if t.open:
            lines.append("  open: every initiator, without ACL or CHAP")
        else:
            lines.append(f"  allow: {', '.join(t.allow) or 'any initiator name'}")
        lines.append(f"  chap: {t.chap.user + ':***' if t.chap else 'none'}")
        lines.append(f"  mutual chap: {t.mutual_chap.user + ':***' if t.mutual_chap else 'none'}")
        if not (t.open or t.allow or t.chap):
            lines.append("  admits no one yet: add an ACL, CHAP, or open it")
    return "\n".join(lines)


def _add_target(document: ConfigDocument, args: argparse.Namespace) -> str:
    config = document.config
    if config.target(args.iqn):
        raise cfg.ConfigError(f"target {args.iqn!r} exists already")
    document.add_target(cfg.Target(iqn=args.iqn, alias=args.alias, open=args.open))
    lines = [f"added target {args.iqn}"]
    if args.open:
        lines.append("it is open: every initiator may log in, without ACL or CHAP")
    else:
        lines.append(
            "it admits no one until it has an ACL (target acl add), CHAP (target chap set) "
            "or is opened to every initiator (target open set, or target add --open)"
        )
    if not config.portals:
        lines.append(
            f"{args.config} has no portal yet: add one with `reservoir target portal "
            f"--config {args.config} add HOST[:PORT]`; "
            f"{cfg.describe_portal('0.0.0.0', cfg.DEFAULT_PORT)} would serve them all"
        )
    return "\n".join(lines)


def _remove_target(document: ConfigDocument, args: argparse.Namespace) -> str:
    document.config.require_target(args.iqn)
    document.remove_target(args.iqn)
    return f"removed target {args.iqn}"


def _lun(document: ConfigDocument, args: argparse.Namespace) -> str:
    target = document.config.require_target(args.iqn)
    if args.op == "remove":
        lun = target.lun(_int(args.path_or_id, "LUN id"))
        if lun is None:
            raise cfg.ConfigError(f"target {args.iqn!r} has no LUN {args.path_or_id}")
        document.remove_lun(args.iqn, lun.id)
        return f"removed LUN {lun.id} from {args.iqn}"
    path = Path(args.path_or_id)
    if not path.exists():
        raise cfg.ConfigError(f"{path}: no such file or device")
    lun_id = args.id if args.id is not None else _next_lun(target)
    if target.lun(lun_id):
        raise cfg.ConfigError(f"target {args.iqn!r} has a LUN {lun_id} already")
    lun = cfg.Lun(lun_id, str(path.resolve()), args.read_only, args.direct, _bulk_writes(args))
    document.add_lun(args.iqn, lun)
    return f"added LUN {lun_id} ({path}) to {args.iqn}"


def _int(text: str, what: str) -> int:
    if not text.isdigit():
        raise cfg.ConfigError(f"{what} must be a number, not {text!r}")
    return int(text)


def _next_lun(target: cfg.Target) -> int:
    used = {lun.id for lun in target.luns}
    return next(i for i in range(16384) if i not in used)


def _acl(document: ConfigDocument, args: argparse.Namespace) -> str:
    target = document.config.require_target(args.iqn)
    if args.op == "add":
        if args.initiator not in target.allow:
            document.allow(args.iqn, args.initiator)
        return f"{args.initiator} may log in to {args.iqn}"
    if args.initiator not in target.allow:
        raise cfg.ConfigError(f"{args.initiator} is not in the ACL of {args.iqn}")
    document.disallow(args.iqn, args.initiator)
    return f"{args.initiator} removed from the ACL of {args.iqn}"


def _chap(document: ConfigDocument, args: argparse.Namespace) -> str:
    document.config.require_target(args.iqn)
    if args.op == "clear":
        document.clear(args.iqn, ("chap", "mutual_chap"))
        return f"CHAP cleared on {args.iqn}"
    chap = _chap_option(args, "chap")
    if chap is None:
        raise cfg.ConfigError(
            "chap set needs --chap USER:SECRET, or --chap USER with --chap-secret-file PATH "
            "or --chap-secret-env NAME"
        )
    document.set_chap(args.iqn, "chap", chap)
    mutual = _chap_option(args, "mutual_chap")
    if mutual is not None:
        document.set_chap(args.iqn, "mutual_chap", mutual)
    return f"CHAP set on {args.iqn} (user {chap.user})"


def _open(document: ConfigDocument, args: argparse.Namespace) -> str:
    document.config.require_target(args.iqn)
    if args.op == "clear":
        document.clear(args.iqn, ("open",))
        return f"{args.iqn} is no longer open to every initiator"
    document.set_open(args.iqn)
    return f"{args.iqn} is open: every initiator may log in, without ACL or CHAP"


def _portal(document: ConfigDocument, args: argparse.Namespace) -> str:
    portal = cfg.parse_portal(args.portal)
    portals = document.config.portals
    if args.op == "add":
        if portal not in portals:
            document.add_portal(portal)
        return f"portal {cfg.describe_portal(*portal)} added"
    if portal not in portals:
        raise cfg.ConfigError(f"no portal {args.portal}")
    document.remove_portal(portal)
    return f"portal {cfg.format_portal(*portal)} removed"
