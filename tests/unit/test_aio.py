"""cancel_and_wait absorbs the cancelled task's end, never the caller's own cancellation;
finish runs cleanup to its end through cancellations and raises them afterwards."""

from __future__ import annotations

import asyncio

import pytest

from reservoir.common.aio import cancel_and_wait, finish


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


def test_finish_runs_cleanup_to_the_end_through_repeated_cancels() -> None:
    steps: list[int] = []

    async def cleanup() -> None:
        for step in range(3):
            await asyncio.sleep(0.02)
            steps.append(step)

    async def main() -> None:
        outer = asyncio.ensure_future(finish(cleanup()))
        for _ in range(2):
            await asyncio.sleep(0.015)
            outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer

    asyncio.run(main())
    assert steps == [0, 1, 2]


def test_finish_without_cancel_returns_and_passes_errors_on() -> None:
    async def failing() -> None:
        await asyncio.sleep(0)
        raise OSError("cleanup failed")

    async def main() -> None:
        await finish(asyncio.sleep(0))
        with pytest.raises(OSError, match="cleanup failed"):
            await finish(failing())

    asyncio.run(main())
