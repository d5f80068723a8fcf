"""How the ``reservoir`` commands log: to stderr, as text (time, level, logger name)
or as JSON lines. Light to import, so a command's own entry (``python -m
reservoir.agent.transfer.cli``) logs as the whole CLI does.

The level follows ``-v`` and ``-q`` (each may be repeated): INFO by default (a copy's
phases, a target's sessions); ``-v`` DEBUG for Reservoir's own loggers, ``-vv`` for
every library too; ``-q`` WARNING, ``-qq`` ERROR. Libraries that log a line for each
request they make (httpx: an agent's heartbeats, the coordinator's polls of its agents)
say it only from ``-v`` on: by default they would bury the lines that matter.

A record logged while an HTTP API answers a request carries the request's id
(:class:`~reservoir.common.request_id.RequestIdFilter`), which the JSON lines show as
``request_id``."""

from __future__ import annotations

import json
import logging
import sys
import time

from reservoir.common.request_id import RequestIdFilter

__all__ = ["FORMATS", "JsonFormatter", "levels", "setup_logging"]

FORMATS = ("text", "json")
TEXT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
PER_REQUEST = ("httpx",)  # a line for every request at INFO


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (RFC 3339, UTC), level, logger, message, the id of
    the HTTP request it was logged for when there is one (``request_id``), and the
    exception's traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line: dict[str, object] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            line["request_id"] = request_id
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)


def setup_logging(verbose: int = 0, quiet: int = 0, fmt: str = "text") -> None:
    """Logging for a command: ``verbose`` and ``quiet`` are the counts of ``-v`` and
    ``-q``; ``fmt`` one of FORMATS."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: one of {', '.join(FORMATS)}")
    everything, ours = levels(verbose, quiet)
    root = logging.getLogger()
    if root.handlers:
        return  # configured already (a test's capture, a program that embeds it)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT))
    handler.addFilter(RequestIdFilter())
    root.addHandler(handler)
    root.setLevel(everything)
    logging.getLogger("reservoir").setLevel(ours)
    for name in PER_REQUEST:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose > quiet else logging.WARNING)


def levels(verbose: int, quiet: int) -> tuple[int, int]:
    """(the root logger's level, Reservoir's loggers' own; NOTSET: the root's)."""
    step = verbose - quiet
    if step == 1:
        return logging.INFO, logging.DEBUG
    if step >= 2:
        return logging.DEBUG, logging.NOTSET
    return {0: logging.INFO, -1: logging.WARNING}.get(step, logging.ERROR), logging.NOTSET
