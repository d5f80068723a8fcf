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


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Whether ``event`` is set within ``timeout`` seconds. ``asyncio.wait_for`` on
    Python 3.11 loses a cancellation that arrives as the event is set (it returns as if
    not cancelled), so a loop waiting so between passes could not be stopped; this
    raises CancelledError then."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()
    return bool(done)


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
