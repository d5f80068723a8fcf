"""Start a coroutine at once and make a Task of it only if it has to wait.

Most commands finish without waiting (a read the page cache serves through
preadv2(RWF_NOWAIT), a TEST UNIT READY): creating a Task for them costs an
allocation, a trip through the event loop and a context switch per command.
This is what Python 3.12's eager task factory does, for 3.11: the coroutine
runs synchronously until its first suspension; from there a :class:`Runner`
drives the rest in a small Task, awaiting each future the coroutine waits on.

Cancelling goes through the future the coroutine waits on, never through the
Task: the coroutine then sees CancelledError where it waits and runs its
``finally`` blocks, even if the Task had not started yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("reservoir.target")


class Runner:
    """The rest of a coroutine that had to wait, driven by ``task``."""

    def __init__(self, coro: Coroutine[Any, Any, None], waiting: Any) -> None:
        self._coro = coro
        self._waiting = waiting
        self.task = asyncio.get_running_loop().create_task(self._drive())

    def cancel(self) -> None:
        """Cancel what the coroutine waits on; it sees CancelledError when it resumes."""
        waiting = self._waiting
        if isinstance(waiting, asyncio.Future) and not waiting.done():
            waiting.cancel()

    def done(self) -> bool:
        return self.task.done()

    async def _drive(self) -> None:
        while True:
            waiting = self._waiting
            if waiting is None:  # a bare yield (asyncio.sleep(0))
                await asyncio.sleep(0)
            else:
                # The coroutine yielded the future flagged blocking, as a Task
                # expects; a Task clears the flag before it waits, and so must we.
                waiting._asyncio_future_blocking = False
                # The outcome, an exception included, is the coroutine's to read.
                with contextlib.suppress(BaseException):
                    await waiting
            try:
                self._waiting = self._coro.send(None)
            except StopIteration:
                return


def start(coro: Coroutine[Any, Any, None]) -> Runner | None:
    """Run ``coro`` until it first waits; None if it finished already."""
    try:
        waiting = coro.send(None)
    except StopIteration:
        return None
    except Exception:
        log.exception("command failed")
        return None
    return Runner(coro, waiting)
