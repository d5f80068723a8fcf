"""A copy held at a known point, for tests that act on a copy while it runs.

A :class:`WriteGate` goes in through the engine's own seam, ``CopyOptions.on_session``
(which sees every stream's destination session as it opens), and wraps each session's
WRITE: the first ``passing`` bytes go to the destination, every later write waits until
the test opens the gate, or for good (the copy ends only when it is paused or cancelled).
A test then waits for the copy's state (progress, telemetry), never for the clock: a
copy that is held cannot complete meanwhile, however slowly the test gets to act.

:func:`gated_copy` puts gates into the copies an agent runs (its ``copy_fn``);
:func:`copy_cancelled_after` stops a copy once some extents are done, its checkpoint
kept for a resume.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from reservoir.agent.control import CopyFn
from reservoir.agent.initiator import Session, WriteData
from reservoir.agent.transfer import CopyOptions, CopySummary, Progress
from reservoir.agent.transfer import copy as engine_copy

__all__ = ["WriteGate", "copy_cancelled_after", "gated_copy"]


class WriteGate:
    """Lets ``passing`` bytes of writes through, then holds every write until :meth:`open`.

    A write is let through whole or held whole (the engine writes ``piece_size`` pieces,
    so ``passing`` should be a multiple of it). :attr:`streams` are the streams whose
    sessions opened, :attr:`held` those with a write waiting now. Install it as
    ``CopyOptions.on_session`` of a copy with a remote destination; call :meth:`open`
    from the copy's event loop.
    """

    def __init__(self, passing: int = 0) -> None:
        self.passing = passing
        self.passed = 0
        self.streams: set[int] = set()
        self.held: set[int] = set()
        self._open = asyncio.Event()  # bound to the copy's loop when first awaited

    def __call__(self, stream: int, session: Session) -> None:
        self.streams.add(stream)
        write = session.write

        async def gated(lun: int, lba: int, data: WriteData, block_size: int = 512) -> None:
            if self.passed + len(data) > self.passing and not self._open.is_set():
                self.held.add(stream)
                try:
                    await self._open.wait()
                finally:
                    self.held.discard(stream)
            else:
                self.passed += len(data)
            await write(lun, lba, data, block_size)

        session.write = gated  # type: ignore[method-assign]  # the test's fault seam

    def open(self) -> None:
        """Lets every write through from now on, the held ones first."""
        self._open.set()


def gated_copy(gates: Sequence[WriteGate]) -> CopyFn:
    """An agent's ``copy_fn``: the engine, its n-th run held by ``gates[n]`` (a copy
    resumed after the gates ran out runs free)."""
    runs = iter(gates)

    async def copy(
        source: str,
        dest: str | Sequence[str],
        options: CopyOptions,
        *,
        progress: Callable[[Progress], None] | None = None,
    ) -> CopySummary:
        options.on_session = next(runs, None)
        return await engine_copy(source, dest, options, progress=progress)

    return copy


async def copy_cancelled_after(
    extents: int, source: str, dest: str, options: CopyOptions
) -> CopySummary:
    """Runs a copy and cancels it (as Ctrl-C would) once ``extents`` extents are done:
    it raises CancelledError, and its checkpoint stays for a resume."""
    task = asyncio.current_task()
    assert task is not None

    def progress(p: Progress) -> None:
        if p.extents_done >= extents:
            task.cancel()

    return await engine_copy(source, dest, options, progress=progress)
