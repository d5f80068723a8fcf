"""How the ``reservoir`` commands log: to stderr, with time, level and logger name;
INFO by default, DEBUG from ``-vv``. Light to import, so a command's own entry
(``python -m reservoir.agent.transfer.cli``) logs as the whole CLI does."""

from __future__ import annotations

import logging
import sys

__all__ = ["setup_logging"]


def setup_logging(verbose: int) -> None:
    level = logging.DEBUG if verbose > 1 else logging.INFO
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
