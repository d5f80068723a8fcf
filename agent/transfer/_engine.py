"""The copy engine: opens both ends, plans, runs the streams, checkpoints, summarizes."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import stat
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reservoir.agent.initiator import (
    Connector,
    InitiatorError,
    RecoveryPolicy,
    ScsiError,
    Session,
    SessionPool,
    Starter,
    jump_connector,
    mptcp_connect,
    tcp_connect,
    with_congestion,
)
from reservoir.agent.iscsi.chap import ChapError
from reservoir.agent.iscsi.pdu import SpanError
from reservoir.agent.iscsi.text import TextError
from reservoir.agent.paths.health import HealthConfig
from reservoir.agent.storage import StorageError
from reservoir.agent.telemetry import DEFAULT_INTERVAL, tcp_info
from reservoir.agent.transfer import _checkpoint as ck
from reservoir.agent.transfer import _end_check as end_check
from reservoir.agent.transfer._caps import StreamCaps
from reservoir.agent.transfer._endpoints import (
    Channel,
    CountingChannel,
    EndpointError,
    Login,
    PathSpec,
    RemoteChannel,
    RemoteLun,
    RemoteSide,
    Side,
    mib,
    open_dest,
    open_source,
    parse_location,
    parse_path,
    resolve_binds,
)
from reservoir.agent.transfer._errors import CopyError, RemoteUnreachableError
from reservoir.agent.transfer._hold import (
    REGISTERED,
    RESERVED,
    HoldError,
    check_distinct,
    give_back,
    hold_key,
)
from reservoir.agent.transfer._paths import DEFAULT_HEALTH, PathMonitor, Pinger
from reservoir.agent.transfer._plan import (
    DEFAULT_EXTENT_SIZE,
    MIN_EXTENT_SIZE,
    Extent,
    Plan,
    Queues,
    ServerPair,
)
from reservoir.agent.transfer._plan import make_plan as _make_plan
from reservoir.agent.transfer._progress import Progress
from reservoir.agent.transfer._reach import may_pass
from reservoir.agent.transfer._source_changes import SourceChanges
from reservoir.agent.transfer._source_watch import SourceWatch, recheck_moved
from reservoir.agent.transfer._stream import (
    Dispatcher,
    Settings,
    StreamStats,
    StreamWorker,
)
from reservoir.agent.transfer._summary import CopySummary, root_hash
from reservoir.agent.transfer._telemetry import Telemetry
from reservoir.common.aio import finish
from reservoir.common.striping import member_ends

log = logging.getLogger("reservoir.copy")

DEFAULT_INITIATOR = "iqn.2026-11.org.reservoir:copy"
COPY_RECOVERY = RecoveryPolicy(attempts=12, first_delay=0.05, max_delay=2.0)
"""A copy's sessions keep logging in again for about 15 s after a lost connection,
long enough for a destination agent to be restarted (a failed *path* is handled
sooner, by the path monitor, which moves its extents to the other paths)."""
TICK = 0.5
VERIFICATIONS = ("storage", "receipt")
"""How a copy is verified. Both end with the whole destination checked extent by
extent after the last extent (_end_check), what differs sent again. ``storage``
hashes each extent from the destination's storage: as it is written where the
destination hashes (HASH RANGE), which keeps the digest it read, so the check at the
end finds the extent unchanged since without reading it again (HASH RANGE 03h); at
the end only where the extent is read back over the network (another target), which
would otherwise read it twice. ``receipt`` checks each extent as it is written,
by the destination's receipts of what its writes received (storage where it keeps
none), so a difference is sent again at once, and at the end by those receipts
again where no change over the extent has dropped them: nothing is read back."""


@dataclass
class CopyOptions:
    streams: int = 4
    extent_size: int = DEFAULT_EXTENT_SIZE
    paths: list[str] = field(default_factory=list)  # LOCAL=REMOTE[:PORT]
    resume: bool = False
    verify: bool = True
    verification: str = "storage"  # or "receipt": see VERIFICATIONS
    checkpoint: Path | None = None
    range: tuple[int, int] | None = None  # (offset, length) in bytes
    initiator_name: str = DEFAULT_INITIATOR
    chap: tuple[str, str] | None = None
    mutual_chap: tuple[str, str] | None = None  # the target's, checked by us
    piece_size: int = 1 << 20
    depth: int = 8
    verify_retries: int = 3
    recovery: RecoveryPolicy = COPY_RECOVERY
    on_session: Callable[[int, Session], None] | None = None  # test and telemetry seam
    telemetry: Path | None = None  # JSON lines: stream samples, path states, progress
    telemetry_interval: float = DEFAULT_INTERVAL
    binds: list[str] = field(default_factory=list)  # LOCAL[/PREFIX], paired by SendTargets
    mptcp: bool = False  # MPTCP sockets (see cli.py for the ip mptcp setup)
    congestion: str | None = None  # TCP congestion control of the streams (None: default)
    health: HealthConfig = DEFAULT_HEALTH  # path health (two paths or more)
    outage_wait: float = 30.0  # every path failed: how long to wait for one to recover
    stripe_unit: int = DEFAULT_EXTENT_SIZE  # several destinations: the level-1 stripe unit
    stream_caps: StreamCaps | None = None  # cwnd caps and pacing rates set from outside
    pool: SessionPool[Session] | None = None  # warm sessions (the agent's; see _endpoints)
    jump: JumpStart | None = None  # new TCP connections start at these rates
    recheck_source: bool = False  # a remote source nothing watches: read again at the end

    @property
    def by_receipts(self) -> bool:
        """Whether each extent is checked as it is written and at the end by the
        destination's receipts (``receipt`` verification), not by its storage."""
        return self.verify and self.verification == "receipt"


@dataclass(frozen=True)
class JumpStart:
    """New TCP connections of a copy start with the window that carries ``rates[local
    address]`` bytes per second for a round trip (see reservoir.agent.initiator._jump)."""

    starter: Starter
    rates: Mapping[str, int]


def _connector(options: CopyOptions) -> Connector | None:
    """TCP (None: the initiator's default), jump-started TCP, MPTCP (never
    jump-started: its subflows are the kernel's), each with its congestion control."""
    if options.mptcp:
        base: Connector = mptcp_connect
    elif options.jump is not None and options.jump.rates:
        base = jump_connector(options.jump.starter, options.jump.rates)
    elif options.congestion is None:
        return None
    else:
        base = tcp_connect
    return base if options.congestion is None else with_congestion(base, options.congestion)


def _transport(options: CopyOptions) -> str:
    """What :func:`_connector` makes, as a pooled session's key names it."""
    kind = "mptcp" if options.mptcp else "tcp"
    return kind if options.congestion is None else f"{kind}/{options.congestion}"


async def copy(
    source: str,
    dest: str | Sequence[str],
    options: CopyOptions,
    *,
    progress: Callable[[Progress], None] | None = None,
) -> CopySummary:
    """Copies ``source`` to ``dest``, or striped over several destinations (a volume
    set, ``options.stripe_unit`` bytes a unit); raises :class:`CopyError`."""
    began = time.monotonic()
    dests = [dest] if isinstance(dest, str) else list(dest)
    _check_options(options, dests)
    login = Login(
        options.initiator_name,
        options.chap,
        options.recovery,
        options.on_session,
        connector=_connector(options),
        mutual_chap=options.mutual_chap,
        pool=options.pool,
        transport=_transport(options),
    )
    with _copy_errors(source, dests):
        paths = [parse_path(p) for p in options.paths]
        if options.binds:
            paths += await resolve_binds(options.binds, _remote_of(source, dests[0]), login)
        log.info(
            "copy %s to %s: %d streams a destination", source, " + ".join(dests), options.streams
        )
        pulled = not any(isinstance(parse_location(d), RemoteLun) for d in dests)
        early = _early(paths, range(options.streams * len(dests))) if pulled else None
        src = await open_source(source, login, early)
        try:
            return await _copy_from(
                src,
                source,
                dests,
                options=options,
                login=login,
                paths=paths,
                progress=progress,
                began=began,
            )
        finally:
            await src.close()


def _check_options(options: CopyOptions, dests: Sequence[str]) -> None:
    """CopyError for options no copy can run with, before anything is opened."""
    if options.streams < 1:
        raise CopyError("--streams must be at least 1")
    if options.extent_size < MIN_EXTENT_SIZE:
        raise CopyError(
            f"extent size {options.extent_size}: at least {MIN_EXTENT_SIZE} bytes (an "
            "extent is a stream's unit of work, hash and checkpoint)"
        )
    if not dests:
        raise CopyError("no destination")
    if len(dests) > 1 and (options.paths or options.binds):
        raise CopyError(
            "--path and --bind name the portals of one destination server; "
            "with several destinations each is reached at its own URL"
        )
    if options.mutual_chap is not None and options.chap is None:
        raise CopyError("mutual CHAP needs the initiator's CHAP credentials too (--chap)")
    if options.verification not in VERIFICATIONS:
        raise CopyError(f"verification {options.verification!r}: one of {', '.join(VERIFICATIONS)}")


@contextlib.contextmanager
def _copy_errors(source: str, dests: Sequence[str]) -> Iterator[None]:
    """Every error of a copy as one :class:`CopyError` line, in words where the
    error says what happened (translated once, here)."""
    try:
        yield
    except CopyError:  # the engine's own: a plan, an endpoint, a hold, a checkpoint...
        raise
    except (ChapError, TextError) as exc:  # CHAP credentials refused; text keys malformed
        raise CopyError(str(exc)) from exc
    except ScsiError as exc:
        raise CopyError(_scsi_failure(exc, dests)) from exc
    except StorageError as exc:
        raise CopyError(_storage_failure(exc, source)) from exc
    except SpanError as exc:  # the source, sent from its file, could not give its bytes
        why = _shrunk_source(source, exc.strerror)
        raise CopyError(why or f"the source {source} could not be read ({exc.strerror})") from exc
    except (InitiatorError, OSError) as exc:
        error = RemoteUnreachableError if may_pass(exc) else CopyError
        raise error(f"{type(exc).__name__}: {exc}") from exc


def _stream_errors(stats: Sequence[StreamStats]) -> str:
    """Why the streams stopped, streams that stopped for the same reason together
    (``streams 0, 1, 2: session to ... lost``)."""
    by_error: dict[str, list[int]] = {}
    for s in stats:
        if s.error:
            by_error.setdefault(s.error, []).append(s.index)
    return "; ".join(
        f"{'streams' if len(ix) > 1 else 'stream'} {', '.join(map(str, ix))}: {error}"
        for error, ix in by_error.items()
    )


OUT_OF_SPACE = (0x7, 0x27, 0x07)  # DATA PROTECT, SPACE ALLOCATION FAILED WRITE PROTECT


FULL = (errno.ENOSPC, errno.EDQUOT)


def _storage_failure(exc: StorageError, source: str) -> str:
    """One line for a local volume that failed; a source read that failed because
    the file is now shorter than the copy says so, a destination out of space."""
    shrunk = None
    if exc.operation == "read" and exc.filename == source:
        shrunk = _shrunk_source(source, exc.strerror)
    if exc.operation == "write" and exc.errno in FULL:
        return (
            f"destination {exc.filename} is out of space ({os.strerror(exc.errno)}): free some, or "
            "copy to a volume with room, and resume to go on from the checkpoint"
        )
    if shrunk:
        return shrunk
    if exc.filename is None:
        return f"StorageError: {exc}"
    side = "source" if exc.filename == source else "destination"
    return f"{side} {exc.filename}: {exc.strerror}"


def _shrunk_source(source: str, why: str | None) -> str | None:
    """The source could not be read (``why``), in words with its size now; None
    where even its size cannot be had."""
    with contextlib.suppress(OSError):
        now = os.stat(source).st_size
        return (
            f"the source {source} could not be read ({why}): it is now "
            f"{mib(now)}; a source must not shrink while it is copied"
        )
    return None


def _scsi_failure(exc: ScsiError, dests: Sequence[str]) -> str:
    """One line for a command a LUN refused, in words where the sense says why."""
    if (exc.sense_key, exc.asc, exc.ascq) == OUT_OF_SPACE:
        which = " or ".join(dests)
        return f"destination LUN {which} is out of space (its backing volume is full)"
    return f"ScsiError: {exc}"


async def _release(channel: Channel) -> None:
    """Ends the copy's hold on a destination; the copy is done, so a failure to
    release is logged, not raised (the reservation stays under the copy's key)."""
    try:
        await channel.release()
    except (InitiatorError, OSError, TimeoutError) as exc:
        log.warning("could not release the destination's reservation: %s", exc)


async def release(source: str, dest: str | Sequence[str], options: CopyOptions) -> list[str]:
    """Ends the hold of the copy of ``source`` to ``dest`` (with ``options.checkpoint``)
    on its remote destinations, without copying (a copy given up: cancelled); the
    destinations it held, as given. One that cannot be reached keeps its reservation
    (logged)."""
    dests = [dest] if isinstance(dest, str) else list(dest)
    key = hold_key(source, dests, options.checkpoint)
    released = []
    for text in dests:
        where = parse_location(text)
        if not isinstance(where, RemoteLun):
            continue
        try:
            async with await Session.open(
                where.host,
                where.port,
                where.iqn,
                initiator_name=options.initiator_name,
                chap=options.chap,
                mutual_chap=options.mutual_chap,
                login_timeout=10.0,
            ) as session:
                if await give_back(session, where.lun, key, text):
                    released.append(text)
        except (InitiatorError, OSError, TimeoutError) as exc:
            log.warning("%s: the copy's reservation was not released: %s", text, exc)
    return released


async def _close_quietly(channel: Channel) -> None:
    with contextlib.suppress(InitiatorError, OSError, TimeoutError):
        await channel.close()


def stream_path(paths: Sequence[PathSpec], stream: int) -> PathSpec | None:
    """The path a stream runs on: the paths dealt round-robin, or none."""
    return paths[stream % len(paths)] if paths else None


def _early(paths: Sequence[PathSpec], streams: range) -> dict[int, PathSpec | None]:
    """The streams whose sessions log in while their remote side is probed."""
    return {i: stream_path(paths, i) for i in streams}


def _remote_of(source: str, dest: str) -> RemoteLun:
    for text in (dest, source):
        where = parse_location(text)
        if isinstance(where, RemoteLun):
            return where
    raise EndpointError("--bind needs a remote (iscsi://) source or destination")


async def _copy_from(
    src: Side,
    source: str,
    dests: list[str],
    *,
    options: CopyOptions,
    login: Login,
    paths: list[PathSpec],
    progress: Callable[[Progress], None] | None,
    began: float,
) -> CopySummary:
    offset, length = _resolve_range(src, options.range)
    unit = options.stripe_unit if len(dests) > 1 else 0
    needs = member_ends(offset, length, unit, len(dests)) if unit > 0 else [offset + length]
    key = hold_key(source, dests, options.checkpoint)
    dsts: list[Side] = []
    try:
        dsts = await _open_dests(
            dests,
            needs,
            login,
            paths,
            streams=options.streams,
            mode=_new_file_mode(source),
            key=key,
            receipts=options.by_receipts,
        )
        try:  # each remote destination was claimed as it was probed; refused, it is not
            plan, checkpoint = await _admit(
                src,
                dsts,
                needs,
                source=source,
                dests=dests,
                span=(offset, length),
                stripe_unit=unit,
                options=options,
            )
        except BaseException:
            await _unclaim(dsts)
            raise
        remote = [d for d in dsts if isinstance(d, RemoteSide)]
        if options.by_receipts:  # a round trip where the probe could not arm them
            await asyncio.gather(*(d.arm_receipts() for d in remote))
        changes = await recheck_moved(src, plan, checkpoint)
        run = Run(
            plan,
            src,
            dsts,
            paths=paths,
            options=options,
            checkpoint=checkpoint,
            progress=progress,
            began=began,
            source_changes=changes,
        )
        return await run.execute()
    finally:
        for dst in dsts:
            await dst.close()


async def _open_dests(
    dests: list[str],
    needs: list[int],
    login: Login,
    paths: list[PathSpec],
    *,
    streams: int,
    mode: int,
    key: int,
    receipts: bool = False,
) -> list[Side]:
    """Every destination opened at once, each remote one probed and claimed under
    ``key`` with its streams' sessions logging in (a striped copy's members in the same
    round trips, not one after the other); where one fails, the others' claims are
    taken back and they are closed."""
    opened = await asyncio.gather(
        *(
            open_dest(
                text,
                login,
                need,
                _early(paths, range(i * streams, (i + 1) * streams)),
                mode=mode,
                hold=key,
                receipts=receipts,
            )
            for i, (text, need) in enumerate(zip(dests, needs, strict=True))
        ),
        return_exceptions=True,
    )
    errors = [o for o in opened if isinstance(o, BaseException)]
    sides = [o for o in opened if not isinstance(o, BaseException)]
    if errors:
        await _unclaim(sides)
        await asyncio.gather(*(side.close() for side in sides))
        raise errors[0]
    return sides


async def _admit(
    src: Side,
    dsts: list[Side],
    needs: list[int],
    *,
    source: str,
    dests: list[str],
    span: tuple[int, int],
    stripe_unit: int,
    options: CopyOptions,
) -> tuple[Plan, ck.Checkpoint]:
    """The copy's plan and checkpoint once its ends are known distinct devices, its
    remote destinations held (their claims judged) and large enough; CopyError before
    any write otherwise."""
    offset, length = span
    ends = [(source, src.device), *((t, d.device) for t, d in zip(dests, dsts, strict=True))]
    check_distinct(ends)
    await asyncio.gather(*(d.settle_hold() for d in dsts if isinstance(d, RemoteSide)))
    for dst, need in zip(dsts, needs, strict=True):
        _check_writable(dst)
        _check_fits(dst, need, offset, length, striped=len(dsts) > 1)
    plan = _make_plan(
        offset,
        length,
        extent_size=options.extent_size,
        block_size=max(src.block_size, *(d.block_size for d in dsts)),
        pairs=tuple(ServerPair(source, d, options.streams) for d in dests),
        stripe_unit=stripe_unit,
    )
    checkpoint = _checkpoint(source, " + ".join(dests), plan, options)
    if checkpoint.done:  # a run before wrote, and held: did the hold last until now?
        for dst in dsts:
            if isinstance(dst, RemoteSide) and dst.holds_reservation:
                dst.hold_watch.unheld_since_last_run()  # its claim won: nothing held it
    return plan, checkpoint


async def _unclaim(dsts: Sequence[Side]) -> None:
    """Takes back the claims of a copy refused before its first write, the one whose
    claim won the reservation last (one LUN under two spellings: its holder goes last,
    so nobody is left registered to be told the reservation went)."""
    remote = [d for d in dsts if isinstance(d, RemoteSide)]
    for dst in sorted(remote, key=lambda d: d.holds_reservation):
        await dst.unclaim()


def _new_file_mode(source: str) -> int:
    """The permissions of a destination file the copy creates: no wider than a local
    source's (before the umask), owner-only for a remote source."""
    where = parse_location(source)
    if isinstance(where, RemoteLun):
        return 0o600
    return stat.S_IMODE(where.stat().st_mode) & 0o666


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


def _check_writable(dst: Side) -> None:
    """A destination its target exports read-only is refused before any write (and
    its claim taken back), not after its first write failed with WRITE PROTECTED."""
    if isinstance(dst, RemoteSide) and dst.write_protected:
        raise CopyError(
            f"{dst.label} is write-protected: its target exports it read-only "
            "(MODE SENSE reports WP); nothing was written"
        )


def _check_fits(dst: Side, need: int, offset: int, length: int, *, striped: bool) -> None:
    if dst.size >= need:
        return
    if striped:
        what = f"{mib(need)} its stripe units reach"
    elif offset == 0:
        what = f"{mib(length)} source"
    else:
        what = f"end of the range ({offset + length})"
    raise CopyError(f"{dst.label} is {mib(dst.size)}, smaller than the {what}")


def _checkpoint(source: str, dest: str, plan: Plan, options: CopyOptions) -> ck.Checkpoint:
    key = ck.CopyKey(source, dest, plan.offset, plan.length, plan.extent_size, plan.stripe_unit)
    path = options.checkpoint or ck.default_path(key)
    if options.resume and path.exists():
        return ck.load(path, key)
    if options.resume:
        raise CopyError(f"--resume: no checkpoint at {path}")
    return ck.Checkpoint(path, key)


class Run:
    """One execution of a plan: the streams, their bookkeeping and the checkpoint.

    With two paths or more, a :class:`PathMonitor` watches them: a failed path's
    streams are stopped (their extents go back to the queue for the other paths) and
    reopened when the path recovers.  ``pinger`` opens a heartbeat session on a path
    (the test seam; by default a session on the remote side).
    """

    def __init__(
        self,
        plan: Plan,
        src: Side,
        dst: Side | Sequence[Side],
        *,
        paths: list[PathSpec],
        options: CopyOptions,
        checkpoint: ck.Checkpoint,
        progress: Callable[[Progress], None] | None,
        pinger: Callable[[PathSpec], Awaitable[Pinger]] | None = None,
        began: float | None = None,
        source_changes: SourceChanges | None = None,
    ) -> None:
        self.dsts = list(dst) if isinstance(dst, Sequence) else [dst]  # one per server pair
        self.plan, self.src, self.dst, self.paths = plan, src, self.dsts[0], paths
        self.options, self.checkpoint, self.progress = options, checkpoint, progress
        self.watch = SourceWatch(
            src,
            plan,
            checkpoint,
            verify=options.verify,
            changes_since=source_changes,
            phase=self._phase,
            recheck=options.recheck_source,
        )
        self.previously_in_flight = set(checkpoint.in_flight)
        self.skipped = {i for i in checkpoint.done if i < len(plan.extents)}
        self.dispatcher = Dispatcher(Queues(plan, self.skipped), plan.streams)
        self.stats = [StreamStats(i, self._path_label(i)) for i in range(plan.streams)]
        self.copied = self.resent = self.mismatches = self.reissued = 0
        self.found = 0  # bytes in flight at the last stop, found on the destination already
        self.end_mismatches = 0  # extents the check at the end found different
        self.end_checked = False  # the whole range was hashed again at the end
        self.receipts: dict[int, bytes] = {}  # extent -> what its receipts should say
        self.done_here: set[int] = set()  # extents this run did (wrote or found), checked
        self.started = time.monotonic()
        # when the copy was asked for, before its sides were opened and probed
        self.began = self.started if began is None else began
        self.workers: dict[int, StreamWorker] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.counters: dict[str, int] = {}
        self.networked: dict[int, RemoteChannel] = {}  # stream -> its channel over a path
        self.specs = {str(p): p for p in paths}
        self.telemetry: Telemetry | None = None
        self._reopening = 0
        self._outage_since: float | None = None  # no stream running since
        self._wake: asyncio.Event | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._kept: list[StreamWorker] = []  # the streams open until the end (_end)
        opener = pinger or self._remote_pinger()
        self.monitor: PathMonitor | None = None
        if len(self.specs) >= 2 and opener is not None:
            specs = self.specs
            self.monitor = PathMonitor(
                list(specs), self, lambda label: opener(specs[label]), config=options.health
            )

    def _remote_pinger(self) -> Callable[[PathSpec], Awaitable[Pinger]] | None:
        side = self.dst if self._dst_remote() else self.src
        if not isinstance(side, RemoteSide):
            return None
        hbspan = self.options.health.hbspan
        return lambda path: side.heartbeat_session(path, hbspan)

    def _path(self, stream: int) -> PathSpec | None:
        return stream_path(self.paths, stream)

    def _path_label(self, stream: int) -> str:
        path = self._path(stream)
        if path is not None:
            return str(path)
        dst = self._dst_of(stream)
        remote = dst if isinstance(dst, RemoteSide) else self.src
        return str(remote.where) if isinstance(remote, RemoteSide) else "local"

    def _dst_of(self, stream: int) -> Side:
        """The destination of the stream's server pair."""
        return self.dsts[self.plan.pair_of(stream)]

    def _streams_of(self, label: str) -> list[int]:
        return [s.index for s in self.stats if s.path == label]

    async def execute(self) -> CopySummary:
        self._wake = asyncio.Event()
        if self.options.telemetry is not None:
            self.telemetry = Telemetry(self.options.telemetry, self.options.telemetry_interval)
            self.telemetry.start()
        try:
            await self._execute()
        finally:
            if self.telemetry is not None:
                self._report()
                await self.telemetry.close()
        return self._summary()

    async def _execute(self) -> None:
        self._phase("source and destination open")
        ticker: asyncio.Task[None] | None = None
        try:
            workers = await self._open_streams()
            caps = self.options.stream_caps
            jumped = f" ({len(caps.jumped)} at their paced rate)" if caps and caps.jumped else ""
            self._phase(f"{len(workers)} of {self.plan.streams} streams open{jumped}")
            ticker = asyncio.create_task(self._tick())
            if self.monitor is not None:
                self.monitor.start()
            try:
                await self._supervise()
            except (InitiatorError, OSError, TimeoutError) as error:
                if (taken := await self._hold_taken()) is not None:
                    raise taken from error  # what the write refused means
                raise
            self._check_complete()
            self._phase(f"every extent written{self._checked_how()}")
            await self._end()
        finally:
            if ticker is not None:
                ticker.cancel()
            await finish(self._stop())
        self._phase("sessions closed")
        self._report()

    def _phase(self, what: str) -> None:
        """Logs where the copy is, with the seconds since it was asked for."""
        elapsed = time.monotonic() - self.began
        log.info("copy to %s: %s at %.2f s", self.checkpoint.key.dest, what, elapsed)

    async def _stop(self) -> None:
        """Stops the streams, saves the checkpoint, closes the sessions."""
        if self.monitor is not None:
            await self.monitor.stop()
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.checkpoint.in_flight = self.dispatcher.in_flight() | self.previously_in_flight
        self.checkpoint.save()
        if self.telemetry is not None:
            await self.telemetry.last_sample()
        if self.options.stream_caps is not None and self.options.pool is not None:
            self.options.stream_caps.lift()  # its sockets may carry the next copy
        await self._close(list(self.workers.values()))
        await asyncio.gather(*self._background, return_exceptions=True)

    def _start(self, worker: StreamWorker) -> None:
        index = worker.stats.index
        self.workers[index] = worker
        self.tasks[index] = asyncio.create_task(worker.run())
        if self._wake is not None:
            self._wake.set()

    async def _supervise(self) -> None:
        """Waits for the streams (their number changes with failover); the first error
        that is not a lost stream stops them all."""
        assert self._wake is not None
        while True:
            for index, task in list(self.tasks.items()):
                if not task.done():
                    continue
                del self.tasks[index]
                self.dispatcher.fail(index)  # anything still held goes back (no-op if none)
                if not task.cancelled() and (error := task.exception()) is not None:
                    raise error
            timeout: float | None = None
            if self.tasks:
                self._outage_since = None
            elif self._reopening == 0 or self._all_done():
                timeout = self._outage_left()
                if timeout <= 0:
                    return
            self._wake.clear()
            waiter = asyncio.create_task(self._wake.wait())
            try:
                await asyncio.wait(
                    {*self.tasks.values(), waiter}, timeout=timeout, return_when="FIRST_COMPLETED"
                )
            finally:
                waiter.cancel()

    def _outage_left(self) -> float:
        """With every stream stopped because their paths failed (the destination agent
        restarting, every link down): seconds left to wait for a path to recover."""
        if self.monitor is None or self._all_done():
            return 0.0
        now = time.monotonic()
        if self._outage_since is None:
            self._outage_since = now
        return max(0.0, self._outage_since + self.options.outage_wait - now)

    def _all_done(self) -> bool:
        return len(self.checkpoint.done) >= len(self.plan.extents)

    async def _open_streams(self) -> list[StreamWorker]:
        """Opens every stream, each starting to write as soon as it is open: a stream
        whose session is in and registered does not wait for the slowest (a cold copy's
        sessions that logged in after the probe register a round trip later). A stream
        that cannot connect is left out; another error stops the copy (:meth:`_stop`
        closes the streams already started)."""

        async def open_and_start(index: int) -> StreamWorker:
            worker = await self._open_stream(index)
            self._start(worker)
            return worker

        opened = await asyncio.gather(
            *(open_and_start(i) for i in range(self.plan.streams)), return_exceptions=True
        )
        workers: list[StreamWorker] = []
        for stats, result in zip(self.stats, opened, strict=True):
            if isinstance(result, StreamWorker):
                workers.append(result)
            elif isinstance(result, InitiatorError | OSError | TimeoutError):
                stats.error = f"{type(result).__name__}: {result}"
            else:
                raise result
        if not workers:
            later = all(may_pass(r) for r in opened if isinstance(r, BaseException))
            error = RemoteUnreachableError if later else CopyError
            raise error(f"no stream could connect: {self.stats[0].error}")
        return workers

    async def _open_stream(self, index: int) -> StreamWorker:
        path, dst = self._path(index), self._dst_of(index)
        src_path = path if self.src.remote and not dst.remote else None
        source = await self.src.channel(index, src_path)
        try:
            dest = await dst.channel(index, path if dst.remote else None)
        except BaseException:
            await source.close()
            raise
        label = self.stats[index].path
        net = dest if dst.remote else source
        if isinstance(net, RemoteChannel):
            self.networked[index] = net
        if self.telemetry is not None and isinstance(net, RemoteChannel):
            self.telemetry.stream(index, label, net.session)
        if self.options.stream_caps is not None and isinstance(net, RemoteChannel):
            self.options.stream_caps.attach(index, net.session.socket)
        if path is not None:
            if src_path is not None:
                source = self._counted(source, label)
            else:
                dest = self._counted(dest, label)
        settings = Settings(
            self.options.piece_size,
            self.options.depth,
            self._checks_as_written(dst),
            self.options.verify_retries,
            receipts=self.options.by_receipts,
        )
        inner = dest.inner if isinstance(dest, CountingChannel) else dest
        tcp_info = inner.session.tcp_info if isinstance(inner, RemoteChannel) else None
        return StreamWorker(
            self.stats[index],
            source,
            dest,
            self.dispatcher,
            settings,
            self._on_done,
            tcp_info,
            maybe_written=self.previously_in_flight,
        )

    def _counted(self, channel: Channel, label: str) -> Channel:
        """Counts the path's progress: the bytes of completed commands."""
        self.counters.setdefault(label, 0)

        def count(length: int) -> None:
            self.counters[label] += length

        return CountingChannel(channel, count)

    def _dst_remote(self) -> bool:
        return self.dst.remote

    def _on_done(
        self,
        worker: StreamWorker,
        extent: Extent,
        digest: bytes,
        receipt: bytes | None,
        wrote: bool,
    ) -> None:
        self.dispatcher.done(worker.stats.index, extent)
        self.done_here.add(extent.id)
        if receipt is not None:
            self.receipts[extent.id] = receipt
        if not wrote:  # in flight at the last stop, and on the destination already
            self.found += extent.length
        else:
            self.copied += extent.length
        if wrote and extent.id in self.previously_in_flight:
            self.resent += extent.length
        self.checkpoint.in_flight = self.dispatcher.in_flight()
        self.checkpoint.record(extent.id, digest)
        self._report()

    # ------------------------------------------------------------ paths (Actions)

    def path_counter(self, path: str) -> int:
        return self.counters.get(path, 0)

    def path_busy(self, path: str) -> bool:
        return any(self.dispatcher.held[i] for i in self._streams_of(path) if i in self.tasks)

    def path_rtt(self, path: str) -> float | None:
        """The largest smoothed RTT (seconds) of the path's open stream sockets."""
        rtts = []
        for index in self._streams_of(path):
            channel = self.networked.get(index)
            sock = channel.session.socket() if channel is not None else None
            if sock is None:
                continue
            try:
                rtt = tcp_info.rtt_us(sock)
            except OSError:  # closed meanwhile
                continue
            if rtt:
                rtts.append(rtt / 1e6)
        return max(rtts, default=None)

    def still_queued(self, extents: set[int]) -> set[int]:
        return extents & set(self.dispatcher.queues.retry)

    def path_event(self, path: str, state: str, reason: str) -> None:
        if self.telemetry is not None:
            self.telemetry.path_state(path, state, reason)

    def fail_path(self, path: str, reason: str) -> set[int]:
        """Stops the path's streams; their extents go back to the queue."""
        moved: set[int] = set()
        for index in self._streams_of(path):
            task = self.tasks.get(index)
            if task is not None and not task.done():
                task.cancel()
            moved |= {e.id for e in self.dispatcher.held[index]}
            self.dispatcher.fail(index)
            if self.stats[index].error is None:
                self.stats[index].error = f"path failed: {reason}"
            worker = self.workers.pop(index, None)
            if worker is not None:
                self._spawn(self._discard(worker))
            if self.telemetry is not None:
                self.telemetry.stream_gone(index)
        if self._wake is not None:
            self._wake.set()
        return moved

    async def recover_path(self, path: str) -> None:
        """Reopens the path's streams that are not running."""
        if self._all_done():
            return
        self._reopening += 1
        try:
            for index in self._streams_of(path):
                if index in self.tasks and not self.tasks[index].done():
                    continue
                try:
                    worker = await asyncio.wait_for(
                        self._open_stream(index), self.options.health.hbspan * 3
                    )
                except (InitiatorError, OSError, TimeoutError) as exc:
                    self.stats[index].error = f"reopen failed: {type(exc).__name__}: {exc}"
                    continue
                self.stats[index].error = None
                self.stats[index].reopened += 1
                self._start(worker)
        finally:
            self._reopening -= 1
            if self._wake is not None:
                self._wake.set()

    def _spawn(self, job: Awaitable[None]) -> None:
        task = asyncio.ensure_future(job)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _discard(self, worker: StreamWorker) -> None:
        """Closes a failed stream's channels without waiting on the dead path."""
        self._count_reissued(worker)
        for channel in (worker.source, worker.dest):
            inner = channel.inner if isinstance(channel, CountingChannel) else channel
            if isinstance(inner, RemoteChannel):
                inner.drop()
            with contextlib.suppress(InitiatorError, OSError, TimeoutError):
                await asyncio.wait_for(channel.close(), 1.0)

    # ------------------------------------------------------------ reporting

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            self._report()
            if self.options.stream_caps is not None:
                self.options.stream_caps.tick()

    def _report(self) -> None:
        done_bytes = sum(self.plan.extent(i).length for i in self.checkpoint.done)
        if self.telemetry is not None:
            self.telemetry.progress(len(self.checkpoint.done), len(self.plan.extents), done_bytes)
        if self.progress is None:
            return
        done = len(self.checkpoint.done)
        up = [s for s in self.stats if s.up]
        self.progress(
            Progress(
                done_bytes=done_bytes,
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
            waited = ""
            if self._outage_since is not None:
                waited = f"; no path came back within {self.options.outage_wait:g} s"
            # a stream ends without raising only when its session or path was lost
            raise RemoteUnreachableError(
                f"every stream failed with {missing} extents left{waited} "
                f"({_stream_errors(self.stats)})"
            )

    async def _end(self) -> None:
        """The copy's end, in two round trips where one step after the other took six:
        the whole destination checked (:meth:`_verify_end`) while every destination
        flushes its cache (SYNCHRONIZE CACHE through a live stream of its pair; once
        more after extents were sent again), the source found unchanged (or equal to
        what was sent: SourceWatch.check), then the holds released while the other
        streams and the path monitor's heartbeat sessions close."""
        pairs = await self._end_workers()
        flushers = self._kept = [streams[0] for streams in pairs.values()]
        flushing = asyncio.ensure_future(self._flush(flushers))
        try:
            resent = await self._verify_end(pairs)
        except BaseException:
            flushing.cancel()  # moot: the copy stops here
            await asyncio.gather(flushing, return_exceptions=True)
            raise
        await flushing
        if resent:
            await self._flush(flushers)
        self._phase("flushed")
        # failing, the copy keeps its holds for its resume
        await self.watch.check([w.source for w in self._kept])
        await self._check_holds()
        if self.telemetry is not None:
            await self.telemetry.last_sample()  # while every session is open
        idle = [w for w in self.workers.values() if w not in flushers]
        await asyncio.gather(
            *(_release(w.dest) for w in flushers),
            *(_close_quietly(c) for worker in idle for c in (worker.source, worker.dest)),
            *([self.monitor.stop()] if self.monitor is not None else []),
        )

    async def _hold_taken(self) -> HoldError | None:
        """A destination's hold another initiator took while the copy ran, if any."""
        for dst in self.dsts:
            if isinstance(dst, RemoteSide) and (taken := await dst.hold_watch.settled()):
                return taken
        return None

    async def _check_holds(self) -> None:
        """Each destination still held by the copy (HoldError if someone took one while
        it ran: _hold_watch); listened to no more, as the copy's own CLEAR comes next."""
        held = [d.hold_watch for d in self.dsts if isinstance(d, RemoteSide)]
        await asyncio.gather(*(watch.stop() for watch in held))
        for watch in held:
            watch.check()

    @staticmethod
    async def _flush(flushers: list[StreamWorker]) -> None:
        await asyncio.gather(*(worker.dest.flush() for worker in flushers))

    async def _verify_end(self, workers: dict[int, list[StreamWorker]]) -> bool:
        """Hashes the whole destination and sends what differs once more (True: some
        was); a copy whose destination still differs fails, naming the ranges
        (_end_check)."""
        if not self.options.verify:
            return False
        wanted = self.checkpoint.done
        hashing = self._verified_by() == "destination"  # every destination hashes
        at_once = end_check.HASHED_AT_ONCE if hashing else end_check.READ_BACK_AT_ONCE
        receipts = self.receipts  # extents this run wrote in receipt mode
        done_here = self.done_here  # ... in either mode (by read-backs: _end_check)
        bad = await end_check.mismatched(
            workers, self.plan.extents, wanted, receipts, at_once, done_here=done_here
        )
        if bad:
            self.end_mismatches = len(bad)
            log.warning(
                "copy to %s: %d extents differ at the end (%s); sending them again",
                self.checkpoint.key.dest,
                len(bad),
                end_check.ranges(bad),
            )
            await end_check.resend(workers, bad)
            still = await end_check.mismatched(
                workers, bad, wanted, receipts, at_once, done_here=done_here
            )
            if still:
                raise CopyError(
                    f"the destination still differs from the source after sending "
                    f"{len(bad)} extents again: {end_check.ranges(still)}"
                )
        self.end_checked = True
        self._phase("whole destination hashed, equal to the source")
        return bool(bad)

    async def _end_workers(self) -> dict[int, list[StreamWorker]]:
        """The live streams of every server pair; a pair left with none gets one."""
        pairs: dict[int, list[StreamWorker]] = {}
        for index, worker in self.workers.items():
            if worker.stats.up:
                pairs.setdefault(self.plan.pair_of(index), []).append(worker)
        for pair in range(len(self.dsts)):
            if pair not in pairs:
                index = self.plan.streams_of(pair)[0]
                worker = await self._open_stream(index)
                self.workers[index] = worker
                pairs[pair] = [worker]
        return pairs

    def _count_reissued(self, worker: StreamWorker) -> None:
        """Write data its sessions sent again after reinstating a lost connection."""
        for channel in (worker.source, worker.dest):
            inner = channel.inner if isinstance(channel, CountingChannel) else channel
            if isinstance(inner, RemoteChannel):
                self.reissued += inner.session.reissued_bytes

    async def _close(self, workers: list[StreamWorker]) -> None:
        """Closes every stream's channels at once (a logout costs a round trip each)."""
        for worker in workers:
            self._count_reissued(worker)
        await asyncio.gather(
            *(_close_quietly(c) for worker in workers for c in (worker.source, worker.dest))
        )

    def _checks_as_written(self, dst: Side) -> bool:
        """Whether a stream into ``dst`` checks each extent as it writes it: by its
        receipts in ``receipt`` mode; in ``storage`` mode where the destination hashes
        its storage (HASH RANGE), which keeps what it read back, so the check at the
        end reads nothing again (_verify_end). A destination that cannot hash is read
        back over the network once, by the check at the end only."""
        return self.options.by_receipts or (self.options.verify and dst.hashes)

    def _checked_how(self) -> str:
        """How the extents were checked as they were written, for the phase log."""
        if self.options.by_receipts:
            return " and checked by its receipts"
        if self._verified_by() == "destination":  # every destination hashes
            return " and hashed from the destination's storage"
        return ""

    def _verified_by(self) -> str:
        if not self.options.verify:
            return ""
        hashes = {d.hashes for d in self.dsts}
        if hashes == {True}:
            return "destination"
        return "read-back" if hashes == {False} else "destination and read-back"

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
            verified=self.options.verify and self.end_checked,
            verified_by=self._verified_by(),
            copied_bytes=self.copied,
            skipped_extents=len(self.skipped),
            skipped_bytes=sum(self.plan.extent(i).length for i in self.skipped),
            found_bytes=self.found,
            resent_bytes=self.resent + sent - self.copied + self.reissued,
            mismatches=sum(s.retries for s in self.stats),
            checkpoint=str(self.checkpoint.path),
            streams=self.stats,
            path_reports=self.monitor.reports() if self.monitor is not None else [],
            end_mismatches=self.end_mismatches,
            hold=self._hold_kind(),
            mode=self.options.verification if self.options.verify else "",
            sessions_opened=sum(s.opened for s in self._remote_sides()),
            sessions_reused=sum(s.reused for s in self._remote_sides()),
            jump_started=len(caps.jumped) if (caps := self.options.stream_caps) else 0,
            first_write=self._first_write(),
            extents=len(self.plan.extents),
            source_watched=self.watch.watched(self.end_checked),
            source_rehashed=self.watch.rehashed,
            source_reread=self.watch.reread,
            changed_since_checkpoint=len(self.watch.changed_since),
            hold_lapses=[
                f"{d.label}: {lapse.describe()}"
                for d in self.dsts
                if isinstance(d, RemoteSide)
                for lapse in d.hold_watch.lapses
            ],
        )

    def _hold_kind(self) -> str:
        """How the destinations were held: the weakest hold of any of them."""
        kinds = {d.hold_kind for d in self.dsts if isinstance(d, RemoteSide)}
        return next((k for k in (REGISTERED, RESERVED) if k in kinds), "")

    def _remote_sides(self) -> list[RemoteSide]:
        return [s for s in (self.src, *self.dsts) if isinstance(s, RemoteSide)]

    def _first_write(self) -> float | None:
        """Seconds from the copy being asked for to its first write (None: none)."""
        at = self.dispatcher.first_write
        return None if at is None else at - self.began
