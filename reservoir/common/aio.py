"""Small asyncio helpers shared by the agent's and the coordinator's components."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
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


async def finish(job: Awaitable[None]) -> None:
    """Run ``job`` to its end even if the caller is cancelled meanwhile (cleanup that
    must not stop halfway: a checkpoint save after stopping the streams); the
    caller's cancellation is raised once ``job`` has ended."""
    task = asyncio.ensure_future(job)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True
    task.result()
    if cancelled:
        raise asyncio.CancelledError
