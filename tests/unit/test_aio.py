"""cancel_and_wait absorbs the cancelled task's end, never the caller's own cancellation."""

from __future__ import annotations

import asyncio

import pytest

from reservoir.agent.aio import cancel_and_wait


async def _slow_to_stop() -> None:
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        await asyncio.sleep(0.05)  # cleanup that takes a while
        raise


def test_cancelled_task_end_is_absorbed() -> None:
    async def main() -> str:
        job = asyncio.ensure_future(_slow_to_stop())
        await asyncio.sleep(0)
        await cancel_and_wait(job)
        return "went on"

    assert asyncio.run(main()) == "went on"


def test_cancellation_of_the_caller_is_not_swallowed() -> None:
    async def caller(job: asyncio.Task[None]) -> str:
        await cancel_and_wait(job)
        return "went on"

    async def main() -> None:
        job = asyncio.ensure_future(_slow_to_stop())
        await asyncio.sleep(0)
        outer = asyncio.ensure_future(caller(job))
        await asyncio.sleep(0.01)  # outer now waits for job's cleanup
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer

    asyncio.run(main())
