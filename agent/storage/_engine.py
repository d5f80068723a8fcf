"""Choosing a backend: available_backends, open_engine and the per-loop default engine."""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import threading
import weakref

from ._base import Engine
from ._errors import StorageError, storage_error
from ._threads import ThreadEngine

log = logging.getLogger(__name__)

ENV_VAR = "RESERVOIR_STORAGE_ENGINE"
KINDS = ("io_uring", "threads")

_defaults: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Engine] = (
    weakref.WeakKeyDictionary()
)
_defaults_lock = threading.Lock()
_warned: set[str] = set()  # fallback reasons already logged at WARNING


@functools.cache
def uring_unavailable() -> str | None:
    """Why io_uring cannot be used here, or None if it can."""
    try:
        from . import _uring  # noqa: PLC0415 - the optional extension: absent without liburing
    except ImportError as exc:
        return f"the _uring extension is not built ({exc})"
    try:
        _uring.probe()
    except OSError as exc:
        return f"io_uring_queue_init failed: {exc}"
    return None


def available_backends() -> list[str]:
    """Usable backends in order of preference, e.g. ["io_uring", "threads"]."""
    return list(KINDS) if uring_unavailable() is None else ["threads"]


def _requested(kind: str) -> str:
    if kind != "auto":
        return kind
    forced = os.environ.get(ENV_VAR, "").strip()
    return forced if forced else "auto"


def _warn_fallback(reason: str) -> None:
    level = logging.DEBUG if reason in _warned else logging.WARNING
    _warned.add(reason)
    log.log(level, "storage engine: io_uring unusable (%s); using the threads backend", reason)


def _open_uring(depth: int, arena: int) -> Engine:
    from ._uring_engine import UringEngine  # noqa: PLC0415 - needs the optional extension

    try:
        return UringEngine(depth, arena=arena)
    except OSError as exc:
        raise storage_error(exc.errno or errno.EIO, "io_uring setup", None, str(exc)) from exc


def open_engine(kind: str = "auto", *, depth: int = 64, arena: int = 0) -> Engine:
    """An engine of the given kind: "auto" (io_uring if usable, else threads),
    "io_uring" or "threads".  RESERVOIR_STORAGE_ENGINE overrides "auto".  ``arena``:
    bytes of memory an io_uring engine registers to write from without a copy
    (:meth:`Engine.arena`; the threads engine has none)."""
    kind = _requested(kind)
    if kind == "threads":
        return ThreadEngine(depth)
    reason = uring_unavailable()
    if kind == "io_uring":
        if reason is not None:
            raise storage_error(errno.ENOSYS, "io_uring setup", None, reason)
        return _open_uring(depth, arena)
    if kind != "auto":
        why = f"unknown storage engine kind {kind!r} (auto, {', '.join(KINDS)})"
        raise storage_error(errno.EINVAL, "storage engine", None, why)
    if reason is None:
        try:
            return _open_uring(depth, arena)
        except StorageError as exc:
            reason = str(exc)
    _warn_fallback(reason)
    return ThreadEngine(depth)


def default_engine() -> Engine:
    """The engine shared by the volumes of the running event loop."""
    loop = asyncio.get_running_loop()
    with _defaults_lock:
        engine = _defaults.get(loop)
        if engine is None or engine.closed:
            _close_stale()
            engine = _defaults[loop] = open_engine()
        return engine


def opened_default_engine() -> Engine | None:
    """The running loop's default engine if one is open (none is opened here)."""
    loop = asyncio.get_running_loop()
    with _defaults_lock:
        engine = _defaults.get(loop)
    return None if engine is None or engine.closed else engine


def _close_stale() -> None:
    """Closes the default engines of loops that were closed."""
    for loop, engine in list(_defaults.items()):
        if loop.is_closed():
            del _defaults[loop]
            engine.close()
