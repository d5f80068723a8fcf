"""cancel_and_wait absorbs the cancelled task's end, never the caller's own cancellation;
finish runs cleanup to its end through cancellations and raises them afterwards;
wait_event never loses a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from reservoir.common.aio import cancel_and_wait, finish, wait_event


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


def test_a_cancellation_that_arrives_as_the_event_is_set_is_not_lost() -> None:
    """asyncio.wait_for on Python 3.11 returns as if not cancelled here: a scheduler
    that a watch woke as the coordinator stopped it went on and never stopped."""

    async def loop_between_passes(event: asyncio.Event) -> str:
        while True:
            await wait_event(event, 10.0)
            event.clear()
            return "went on"

    async def main() -> None:
        event = asyncio.Event()
        task = asyncio.create_task(loop_between_passes(event))
        await asyncio.sleep(0)  # it waits
        event.set()
        task.cancel()  # in the same iteration
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_wait_event_says_whether_the_event_came_in_time() -> None:
    async def main() -> None:
        event = asyncio.Event()
        assert not await wait_event(event, 0.01)
        asyncio.get_running_loop().call_later(0.01, event.set)
        assert await wait_event(event, 5.0)

    asyncio.run(main())
