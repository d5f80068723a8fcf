"""Small asyncio helpers shared by the agent's components."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait until it has ended.

    The CancelledError that ends ``task`` is absorbed, but a cancellation of the
    caller itself that arrives meanwhile is not: ``suppress(CancelledError)``
    around the ``await`` would swallow both, and a pause or cancel of the caller
    would then be lost.
    """
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
