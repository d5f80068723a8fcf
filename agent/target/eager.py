"""Start a coroutine at once and make a Task of it only if it has to wait.

Most commands finish without waiting (a read the page cache serves through
preadv2(RWF_NOWAIT), a TEST UNIT READY): creating a Task for them costs an
allocation, a trip through the event loop and a context switch per command.
This is what Python 3.12's eager task factory does, for 3.11: the coroutine
runs synchronously until its first suspension; from there a small Task drives
the rest, awaiting each future the coroutine waits on.  Cancelling that Task
cancels the future, and the coroutine sees CancelledError when it resumes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("reservoir.target")


def start(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Run ``coro`` until it first waits; None if it finished already."""
    try:
        waiting = coro.send(None)
    except StopIteration:
        return None
    except Exception:
        log.exception("command failed")
        return None
    return asyncio.get_running_loop().create_task(_drive(coro, waiting))


async def _drive(coro: Coroutine[Any, Any, None], waiting: Any) -> None:
    while True:
        if waiting is not None:
            # The coroutine yielded the future as a Task would see it, flagged
            # blocking; a Task clears the flag before waiting, and so must we.
            waiting._asyncio_future_blocking = False
        try:
            if waiting is None:  # a bare yield (asyncio.sleep(0))
                await asyncio.sleep(0)
            else:
                await waiting
        except BaseException:  # the coroutine reads the outcome itself when resumed
            pass
        try:
            waiting = coro.send(None)
        except StopIteration:
            return
