"""The copy engine: opens both ends, plans, runs the streams, checkpoints, summarizes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from reservoir.agent.initiator import InitiatorError, RecoveryPolicy, Session
from reservoir.agent.storage import StorageError
from reservoir.agent.transfer import _checkpoint as ck
from reservoir.agent.transfer._endpoints import (
    EndpointError,
    Login,
    PathSpec,
    RemoteSide,
    Side,
    mib,
    open_dest,
    open_source,
    parse_path,
)
from reservoir.agent.transfer._plan import DEFAULT_EXTENT_SIZE, Extent, Plan, Queues, ServerPair
from reservoir.agent.transfer._plan import make_plan as _make_plan
from reservoir.agent.transfer._progress import Progress
from reservoir.agent.transfer._stream import (
    Dispatcher,
    Settings,
    StreamStats,
    StreamWorker,
    VerifyError,
)
from reservoir.agent.transfer._summary import CopySummary, root_hash

DEFAULT_INITIATOR = "iqn.2026-11.org.reservoir:copy"
TICK = 0.5


class CopyError(Exception):
    """The copy failed; the message is one clear line."""


@dataclass
class CopyOptions:
    streams: int = 4
    extent_size: int = DEFAULT_EXTENT_SIZE
    paths: list[str] = field(default_factory=list)  # LOCAL=REMOTE[:PORT]
    resume: bool = False
    verify: bool = True
    checkpoint: Path | None = None
    range: tuple[int, int] | None = None  # (offset, length) in bytes
    initiator_name: str = DEFAULT_INITIATOR
    chap: tuple[str, str] | None = None
    piece_size: int = 1 << 20
    depth: int = 8
    verify_retries: int = 3
    recovery: RecoveryPolicy | None = None
    on_session: Callable[[int, Session], None] | None = None  # test and telemetry seam


async def copy(
    source: str,
    dest: str,
    options: CopyOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
) -> CopySummary:
    """Copies ``source`` to ``dest``; raises :class:`CopyError`."""
    if options.streams < 1:
        raise CopyError("--streams must be at least 1")
    login = Login(options.initiator_name, options.chap, options.recovery, options.on_session)
    try:
        paths = [parse_path(p) for p in options.paths]
        src = await open_source(source, login)
        try:
            return await _copy_from(
                src, source, dest, options=options, login=login, paths=paths, progress=progress
            )
        finally:
            await src.close()
    except (EndpointError, ck.CheckpointError, VerifyError, ValueError) as exc:
        raise CopyError(str(exc)) from exc
    except (InitiatorError, StorageError, OSError) as exc:
        raise CopyError(f"{type(exc).__name__}: {exc}") from exc


async def _copy_from(
    src: Side,
    source: str,
    dest: str,
    *,
    options: CopyOptions,
    login: Login,
    paths: list[PathSpec],
    progress: Callable[[Progress], None] | None,
) -> CopySummary:
    offset, length = _resolve_range(src, options.range)
    dst = await open_dest(dest, login, offset + length)
    try:
        _check_fits(src, dst, offset, length)
        block = max(src.block_size, dst.block_size)
        plan = _make_plan(
            offset,
            length,
            extent_size=options.extent_size,
            block_size=block,
            pair=ServerPair(source, dest, options.streams),
        )
        checkpoint = _checkpoint(source, dest, plan, options)
        run = Run(
            plan, src, dst, paths=paths, options=options, checkpoint=checkpoint, progress=progress
        )
        return await run.execute()
    finally:
        await dst.close()


def _resolve_range(src: Side, wanted: tuple[int, int] | None) -> tuple[int, int]:
    if wanted is None:
        if src.size <= 0:
            raise CopyError(f"{src.label} is empty")
        return 0, src.size
    offset, length = wanted
    if offset < 0 or length <= 0 or offset + length > src.size:
        raise CopyError(
            f"range {offset}:{length} is outside the {mib(src.size)} of the {src.label}"
        )
    return offset, length


def _check_fits(src: Side, dst: Side, offset: int, length: int) -> None:
    if dst.size < offset + length:
        what = f"{mib(length)} source" if offset == 0 else f"end of the range ({offset + length})"
        raise CopyError(f"{dst.label} is {mib(dst.size)}, smaller than the {what}")


def _checkpoint(source: str, dest: str, plan: Plan, options: CopyOptions) -> ck.Checkpoint:
    key = ck.CopyKey(source, dest, plan.offset, plan.length, plan.extent_size)
    path = options.checkpoint or ck.default_path(key)
    if options.resume and path.exists():
        return ck.load(path, key)
    if options.resume:
        raise CopyError(f"--resume: no checkpoint at {path}")
    return ck.Checkpoint(path, key)


async def _run_all(workers: list[StreamWorker]) -> None:
    """Runs every stream; the first error that is not a lost stream stops them all."""
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Run:
    """One execution of a plan: the streams, their bookkeeping and the checkpoint."""

    def __init__(
        self,
        plan: Plan,
        src: Side,
        dst: Side,
        *,
        paths: list[PathSpec],
        options: CopyOptions,
        checkpoint: ck.Checkpoint,
        progress: Callable[[Progress], None] | None,
    ) -> None:
        self.plan, self.src, self.dst, self.paths = plan, src, dst, paths
        self.options, self.checkpoint, self.progress = options, checkpoint, progress
        self.previously_in_flight = set(checkpoint.in_flight)
        self.skipped = {i for i in checkpoint.done if i < len(plan.extents)}
        self.dispatcher = Dispatcher(Queues(plan, self.skipped), plan.streams)
        self.stats = [StreamStats(i, self._path_label(i)) for i in range(plan.streams)]
        self.copied = self.resent = self.mismatches = 0
        self.started = time.monotonic()

    def _path(self, stream: int) -> PathSpec | None:
        return self.paths[stream % len(self.paths)] if self.paths else None

    def _path_label(self, stream: int) -> str:
        path = self._path(stream)
        if path is not None:
            return str(path)
        remote = self.dst if isinstance(self.dst, RemoteSide) else self.src
        return str(remote.where) if isinstance(remote, RemoteSide) else "local"

    async def execute(self) -> CopySummary:
        workers = await self._open_streams()
        ticker = asyncio.create_task(self._tick())
        try:
            await _run_all(workers)
            self._check_complete()
            await self._flush(workers)
        finally:
            ticker.cancel()
            self.checkpoint.in_flight = self.dispatcher.in_flight() | self.previously_in_flight
            self.checkpoint.save()
            await self._close(workers)
        self._report()
        return self._summary()

    async def _open_streams(self) -> list[StreamWorker]:
        opened = await asyncio.gather(
            *(self._open_stream(i) for i in range(self.plan.streams)), return_exceptions=True
        )
        workers: list[StreamWorker] = []
        for stats, result in zip(self.stats, opened, strict=True):
            if isinstance(result, StreamWorker):
                workers.append(result)
            elif isinstance(result, InitiatorError | OSError | TimeoutError):
                stats.error = f"{type(result).__name__}: {result}"
            else:
                await self._close(workers)
                raise result
        if not workers:
            raise CopyError(f"no stream could connect: {self.stats[0].error}")
        return workers

    async def _open_stream(self, index: int) -> StreamWorker:
        path = self._path(index)
        src_path = path if isinstance(self.src, RemoteSide) and not self._dst_remote() else None
        source = await self.src.channel(index, src_path)
        try:
            dest = await self.dst.channel(index, path if self._dst_remote() else None)
        except BaseException:
            await source.close()
            raise
        settings = Settings(
            self.options.piece_size,
            self.options.depth,
            self.options.verify,
            self.options.verify_retries,
        )
        return StreamWorker(
            self.stats[index], source, dest, self.dispatcher, settings, self._on_done
        )

    def _dst_remote(self) -> bool:
        return isinstance(self.dst, RemoteSide)

    def _on_done(self, worker: StreamWorker, extent: Extent, digest: bytes) -> None:
        self.dispatcher.done(worker.stats.index, extent)
        self.copied += extent.length
        if extent.id in self.previously_in_flight:
            self.resent += extent.length
        self.checkpoint.in_flight = self.dispatcher.in_flight()
        self.checkpoint.record(extent.id, digest)
        self._report()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            self._report()

    def _report(self) -> None:
        if self.progress is None:
            return
        done = len(self.checkpoint.done)
        up = [s for s in self.stats if s.up]
        self.progress(
            Progress(
                done_bytes=sum(self.plan.extent(i).length for i in self.checkpoint.done),
                total_bytes=self.plan.length,
                sent_bytes=sum(s.bytes for s in self.stats),
                elapsed=time.monotonic() - self.started,
                extents_done=done,
                extents_total=len(self.plan.extents),
                streams_up=len(up),
                streams=len(self.stats),
                paths_up=len({s.path for s in up}),
                paths=len({s.path for s in self.stats}),
            )
        )

    def _check_complete(self) -> None:
        missing = len(self.plan.extents) - len(self.checkpoint.done)
        if missing:
            errors = "; ".join(f"stream {s.index}: {s.error}" for s in self.stats if s.error)
            raise CopyError(f"every stream failed with {missing} extents left ({errors})")

    async def _flush(self, workers: list[StreamWorker]) -> None:
        for worker in workers:
            if worker.stats.up:
                await worker.dest.flush()
                return

    async def _close(self, workers: list[StreamWorker]) -> None:
        for worker in workers:
            for channel in (worker.source, worker.dest):
                with contextlib.suppress(InitiatorError, OSError, TimeoutError):
                    await channel.close()

    def _summary(self) -> CopySummary:
        digests = [self.checkpoint.done[e.id] for e in self.plan.extents]
        sent = sum(s.bytes for s in self.stats)
        return CopySummary(
            source=self.checkpoint.key.source,
            dest=self.checkpoint.key.dest,
            offset=self.plan.offset,
            length=self.plan.length,
            extent_size=self.plan.extent_size,
            elapsed=time.monotonic() - self.started,
            root_hash=root_hash(digests),
            verified=self.options.verify,
            copied_bytes=self.copied,
            skipped_extents=len(self.skipped),
            skipped_bytes=sum(self.plan.extent(i).length for i in self.skipped),
            resent_bytes=self.resent + sent - self.copied,
            mismatches=sum(s.retries for s in self.stats),
            checkpoint=str(self.checkpoint.path),
            streams=self.stats,
        )
