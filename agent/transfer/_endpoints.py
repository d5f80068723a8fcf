"""Copy endpoints: ``iscsi://HOST[:PORT]/IQN/LUN`` or a local path, and ``--path``.

A :class:`Side` is one end of the copy (its size and block size); it opens one
:class:`Channel` per stream: a remote side gives every stream its own iSCSI
session (its own TCP connection, bound to the stream's path), a local side shares
one open volume.

With a pool of warm sessions (:attr:`Login.pool`, the agent's), a remote side takes
its sessions from the pool where one of the same path is there, and gives back at
its close the healthy ones that carry nothing of the copy: a session registered
under the copy's reservation key is given back only once the copy's CLEAR removed
every registration of the LUN (a completed copy); the sessions of a copy that keeps
its hold (paused, failed: to be resumed) are logged out as without a pool, so no
session of the pool can write under an old key. Caps on their sockets are lifted by
the engine before (:meth:`StreamCaps.lift`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import stat
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar
from urllib.parse import urlsplit

import xxhash

from reservoir.agent.initiator import (
    Connector,
    InitiatorError,
    RecoveryPolicy,
    ScsiError,
    Session,
    SessionKey,
    SessionPool,
    WriteData,
    arm_receipts,
    change_mark,
    chap_identity,
    device_designator,
    discover,
    hash_range,
    hash_read_back,
    hash_receipts,
    pr_clear,
    pr_register,
    supports_hash_range,
    write_protected,
)
from reservoir.agent.iscsi.pdu import FileSpan
from reservoir.agent.scsi import MAX_HASH_BYTES, derive_naa
from reservoir.agent.storage import ChangeMark, Volume, open_volume, volume_identity
from reservoir.agent.transfer._errors import CopyError, RemoteUnreachableError
from reservoir.agent.transfer._hold import (
    REGISTERED,
    RESERVED,
    PrState,
    claim,
    hold_by_registration,
    holder_gone,
    read_pr_state,
    settle,
    unclaim,
    writes_allowed,
)
from reservoir.agent.transfer._hold_watch import HoldWatch
from reservoir.agent.transfer._reach import may_pass, no_such_lun, reach_failure
from reservoir.agent.transfer._source_changes import Rehasher

log = logging.getLogger("reservoir.copy")

ISCSI_PORT = 3260
REMOTE_REHASH_AT_ONCE = 32  # HASH RANGE commands in flight, to hash a source again
REREAD_AT_ONCE, REREAD_PIECE = 8, 1 << 20  # extents read again at once, and each read's size
NO_MARK = ChangeMark("", "")  # a source nothing can tell a change of: it never moves
EARLY_GRACE = 3.0  # s an unclaimed early session may take to finish logging in
_OURS = "hash range"  # Session.learned: whether a LUN is our target's, with HASH RANGE
T = TypeVar("T")
SYNCHRONIZE_CACHE_10 = bytes([0x35]) + bytes(9)


class EndpointError(CopyError):
    """A location, a path or an endpoint that cannot be used."""


@dataclass(frozen=True, slots=True)
class RemoteLun:
    host: str
    port: int
    iqn: str
    lun: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"iscsi://{host}:{self.port}/{self.iqn}/{self.lun}"


@dataclass(frozen=True, slots=True)
class PathSpec:
    """``--path LOCAL=REMOTE[:PORT]``: bind to LOCAL, connect to REMOTE."""

    local: str
    remote: str
    port: int | None = None

    def __str__(self) -> str:
        return f"{self.local}={self.remote}" + (f":{self.port}" if self.port else "")


def parse_location(text: str) -> RemoteLun | Path:
    if not text.startswith("iscsi://"):
        return Path(text)
    url = urlsplit(text)
    parts = url.path.strip("/").split("/")
    try:
        host, port = url.hostname, url.port or ISCSI_PORT
        lun = int(parts[1]) if len(parts) == 2 else -1
    except ValueError:
        lun = -1
    if not host or len(parts) != 2 or not parts[0] or lun < 0:
        raise EndpointError(f"{text!r} is not iscsi://HOST[:PORT]/IQN/LUN")
    return RemoteLun(host, port, parts[0], lun)


def parse_path(text: str) -> PathSpec:
    local, sep, remote = text.partition("=")
    if not sep or not local or not remote:
        raise EndpointError(f"--path {text!r} is not LOCAL=REMOTE[:PORT]")
    host, colon, port = remote.rpartition(":")
    if colon and port.isdigit() and "]" not in port:
        return PathSpec(local, host.strip("[]"), int(port))
    return PathSpec(local, remote.strip("[]"))


class Channel(Protocol):
    async def read(self, offset: int, length: int) -> bytes: ...

    async def readinto(self, offset: int, view: memoryview) -> None: ...

    async def write(self, offset: int, data: WriteData) -> None: ...

    async def digest(self, offset: int, length: int) -> bytes | None:
        """The destination's own XXH3-128 of the range; None where it cannot hash
        (the caller reads the range back instead)."""
        ...

    async def receipt(self, offset: int, length: int) -> bytes | None:
        """The destination's digest of what the writes that last wrote the range
        received (:func:`reservoir.agent.scsi.receipt_digest`); None where it has no
        receipt for some of it (the caller checks storage instead)."""
        ...

    async def read_back(self, offset: int, length: int) -> bytes | None:
        """The digest the destination read back from its storage when last asked to
        hash exactly this range, where no change went over it since; None where it
        kept none (the caller asks for its storage's digest now)."""
        ...

    async def flush(self) -> None: ...

    async def release(self) -> None:
        """Ends the copy's hold on the destination (its persistent reservation)."""
        ...

    async def close(self) -> None: ...


@dataclass
class Login:
    """How remote sessions log in; ``on_session`` sees every stream's session."""

    initiator_name: str
    chap: tuple[str, str] | None = None
    recovery: RecoveryPolicy | None = None
    on_session: Callable[[int, Session], None] | None = None
    connector: Connector | None = None  # MPTCP, or a test's
    mutual_chap: tuple[str, str] | None = None  # the target's credentials (mutual CHAP)
    pool: SessionPool[Session] | None = None  # warm sessions, taken and given back
    transport: str = "tcp"  # what ``connector`` makes, in the key of a pooled session


class Side(Protocol):
    label: str
    size: int
    block_size: int
    remote: bool  # channels go over the network (and over the streams' paths)
    device: str | None  # which device it is, whatever the spelling (None: unknown)
    hashes: bool  # its channels' digest() is its own hash of its storage (HASH RANGE)

    async def channel(self, stream: int, path: PathSpec | None) -> Channel: ...

    async def close(self) -> None: ...


def mib(size: int) -> str:
    return f"{size / (1 << 20):g} MiB"


class LocalChannel:
    def __init__(self, volume: Volume) -> None:
        self.volume = volume

    async def read(self, offset: int, length: int) -> bytes:
        return await self.volume.read(offset, length)

    async def readinto(self, offset: int, view: memoryview) -> None:
        await self.volume.readinto(offset, view)

    async def write(self, offset: int, data: WriteData) -> None:
        if isinstance(data, FileSpan):
            data = await asyncio.to_thread(data.read)
        await self.volume.write(offset, data)

    async def digest(self, offset: int, length: int) -> bytes | None:
        return None  # reading a local volume back is as cheap as hashing it here

    async def receipt(self, offset: int, length: int) -> bytes | None:
        return None

    async def read_back(self, offset: int, length: int) -> bytes | None:
        return None

    async def flush(self) -> None:
        await self.volume.flush()

    async def release(self) -> None:
        return None

    async def close(self) -> None:
        return None


def span_volume(source: Channel, dest: Channel) -> Volume | None:
    """The local volume ``source`` reads, where its extents can go to ``dest`` as
    spans of the file (sendfile, no copy through memory): ``dest`` is a session
    without data digests. None where they go through memory."""
    inner = dest.inner if isinstance(dest, CountingChannel) else dest
    if not isinstance(source, LocalChannel) or not isinstance(inner, RemoteChannel):
        return None
    return source.volume if inner.session.sends_spans else None


def local_device(path: Path) -> str:
    """The designator our target gives a LUN backed by ``path`` (see
    :func:`reservoir.agent.storage.volume_identity`)."""
    return "naa." + derive_naa(volume_identity(path)).hex()


class LocalSide:
    remote = False
    hashes = False  # reading a local volume back is as cheap as hashing it here

    def __init__(self, volume: Volume, label: str, path: Path) -> None:
        self.volume, self.label = volume, label
        self.size, self.block_size = volume.size, volume.block_size
        self.device: str | None = local_device(path)

    async def channel(self, stream: int, path: PathSpec | None) -> Channel:
        return LocalChannel(self.volume)

    def change_mark(self) -> ChangeMark:
        """What tells whether the volume was written since (a copy's source)."""
        return self.volume.change_mark()

    async def close(self) -> None:
        self.volume.close()


class SessionHome(Protocol):
    """Where a channel's session goes when the channel closes (its side)."""

    async def retire(self, session: Session, *, reusable: bool = True) -> None: ...

    def hold_cleared(self, by: Session) -> None: ...


class RemoteChannel:
    def __init__(
        self,
        session: Session,
        lun: int,
        block_size: int,
        hashes: bool = False,
        hold: int | None = None,
        *,
        home: SessionHome | None = None,
    ) -> None:
        self.session, self.lun, self.bs = session, lun, block_size
        self.hashes = hashes  # the target answers HASH RANGE
        self.hold = hold  # the reservation key this session is registered with
        self.home = home  # None: the session is logged out when the channel closes
        self.dropped = False  # its connection was broken on purpose: never reused

    async def read(self, offset: int, length: int) -> bytes:
        return await self.session.read(self.lun, offset // self.bs, length // self.bs, self.bs)

    async def readinto(self, offset: int, view: memoryview) -> None:
        view[:] = await self.read(offset, len(view))

    async def write(self, offset: int, data: WriteData) -> None:
        await self.session.write(self.lun, offset // self.bs, data, self.bs)

    async def digest(self, offset: int, length: int) -> bytes | None:
        if not self.hashes or length > MAX_HASH_BYTES:
            return None
        return await hash_range(self.session, self.lun, offset // self.bs, length // self.bs)

    async def receipt(self, offset: int, length: int) -> bytes | None:
        if not self.hashes or length > MAX_HASH_BYTES:
            return None
        try:
            return await hash_receipts(self.session, self.lun, offset // self.bs, length // self.bs)
        except ScsiError:
            return None  # a target of ours from before receipts: storage is checked

    async def read_back(self, offset: int, length: int) -> bytes | None:
        if not self.hashes or length > MAX_HASH_BYTES:
            return None
        try:
            return await hash_read_back(
                self.session, self.lun, offset // self.bs, length // self.bs
            )
        except ScsiError:
            return None  # a target of ours from before read-backs: storage is hashed

    async def flush(self) -> None:
        await self.session.scsi(self.lun, SYNCHRONIZE_CACHE_10)

    async def release(self) -> None:
        if self.hold is not None:
            await pr_clear(self.session, self.lun, self.hold)
            if self.home is not None:
                self.home.hold_cleared(self.session)

    def drop(self) -> None:
        """Breaks the connection at once (a failed path: no logout to wait for)."""
        self.dropped = True
        if self.session.transport is not None:
            self.session.transport.drop()

    async def close(self) -> None:
        if self.home is None:
            await self.session.close()
        else:
            await self.home.retire(self.session, reusable=not self.dropped)


class RemoteSide:
    """A remote LUN. Its streams' sessions can start logging in before the LUN is
    probed (:meth:`open_early`): a login costs 2 round trips (connect, login), a
    probe on its own session 4 (connect, login, the commands, logout), so probing on
    the first early session that is in saves 3 of the 6 round trips a copy used to
    wait before its first write: over 1 s at 350 ms."""

    remote = True

    def __init__(
        self, where: RemoteLun, login: Login, label: str, destination: bool = False
    ) -> None:
        self.where, self.login, self.label = where, login, label
        self.size = self.block_size = 0
        self.hashes = False  # whether the target verifies extents itself (HASH RANGE)
        self.device: str | None = None  # its designator (INQUIRY VPD 0x83)
        self.write_protected = False  # a destination its target exports read-only
        self.mark: ChangeMark | None = None  # a source's change mark, where its target has one
        self.destination = destination  # its reservations are read, to hold it
        self.hold: int | None = None  # the copy's reservation key, once held (see _hold)
        self.hold_kind = ""  # RESERVED, or REGISTERED where the target needs it (_hold)
        self.holder: Session | None = None  # the session that reserved, while in
        self._writers_checked = False  # whether a non-holder tried its harmless write
        self._hold_lock = asyncio.Lock()
        self.pr_state = PrState()
        self._early: dict[int, tuple[PathSpec | None, asyncio.Task[Session]]] = {}
        self._prober: Session | None = None  # the session that was asked (probe)
        self._own: Session | None = None  # the prober, when no stream's session was in
        self.opened = self.reused = 0  # sessions logged in, and taken from the pool
        # (the streams' and the probe's: not a path monitor's heartbeat sessions)
        self._keys: dict[Session, SessionKey] = {}  # the pool's sessions and their keys
        self._registered: set[Session] = set()  # under the copy's key, or may be (_hold)
        # registered under the copy's key: by the probe's claim, or once logged in
        self._holding: set[Session] = set()
        # early sessions still logging in at the probe: each registers once it is in
        # (its stream waits for that), not when its stream takes it, a round trip on
        self._registering: dict[int, tuple[asyncio.Task[Session], asyncio.Task[None]]] = {}
        self._claim_taken_back = False  # no session registers any more (unclaim)
        # the probe's claim, until judged: (key, reserved, others, their answers)
        self._claim: tuple[int, bool | None, list[Session], Sequence[object]] | None = None
        self._cleared = False  # the copy's CLEAR removed every registration
        self._clearer: Session | None = None  # the session that sent it
        self._retired: dict[Session, None] = {}  # to give back at close, in order
        self._armed = False  # the probe armed the target's receipts
        self.hold_watch = HoldWatch(self, where.lun, time.monotonic())

    def _key(self, path: PathSpec | None) -> SessionKey:
        return SessionKey(
            host=path.remote if path else self.where.host,
            port=path.port if path and path.port else self.where.port,
            target=self.where.iqn,
            initiator_name=self.login.initiator_name,
            credentials=chap_identity(self.login.chap, self.login.mutual_chap),
            local_address=path.local if path else None,
            transport=self.login.transport,
        )

    async def _open(
        self,
        path: PathSpec | None,
        recovery: RecoveryPolicy | None = None,
        timeout: float = 10.0,
        *,
        pooled: bool = True,
    ) -> Session:
        """A session on ``path``: a warm one of the pool if there is one, else a new
        login; ``pooled`` False for one that never comes from nor goes to the pool."""
        key, pool = self._key(path), self.login.pool if pooled else None
        policy = recovery or self.login.recovery
        session = pool.take(key) if pool is not None else None
        if session is not None:
            session.reuse(policy)
            self.reused += 1
        else:
            session = await Session.open(
                key.host,
                key.port,
                key.target,
                initiator_name=key.initiator_name,
                chap=self.login.chap,
                mutual_chap=self.login.mutual_chap,
                local_address=key.local_address,
                recovery=policy,
                connector=self.login.connector,
                login_timeout=timeout,
            )
            self.opened += pooled  # a path monitor's heartbeats are not the copy's
        if pool is not None:
            self._keys[session] = key
        return session

    async def heartbeat_session(self, path: PathSpec, timeout: float) -> Session:
        """A session on ``path`` for NOP-Out heartbeats: it does not reconnect by itself
        (a failed ping drops it and the next heartbeat logs in afresh); never pooled."""
        policy = RecoveryPolicy(attempts=1, first_delay=0.0)
        return await self._open(path, policy, timeout, pooled=False)

    async def asking_session(self) -> Session:
        """A session of the side's own, over no path, to ask its target more than the
        probe did (a moved source's extents hashed again at a resume); :meth:`retire`
        it after."""
        return await self._open(None)

    async def retire(self, session: Session, *, reusable: bool = True) -> None:
        """A session the copy is done with: kept to be given back to the pool when the
        side closes (:meth:`close`), or logged out now (no pool, not reusable)."""
        if session in self._retired:
            return
        if reusable and session in self._keys and session.reusable:
            self._retired[session] = None
        else:
            self._keys.pop(session, None)
            await session.close()

    def hold_cleared(self, by: Session) -> None:
        """The copy's CLEAR went through (sent by ``by``): no session of the LUN is
        registered any more, and the others that were have a unit attention."""
        self._cleared, self._clearer = True, by

    def open_early(self, streams: dict[int, PathSpec | None]) -> None:
        """Starts logging in these streams' sessions now; :meth:`channel` takes them."""
        loop = asyncio.get_running_loop()
        for stream, path in streams.items():
            self._early[stream] = (path, loop.create_task(self._open(path)))

    async def probe(self, hold: int | None = None, receipts: bool = False) -> None:
        """The LUN's size, block size and whether it hashes: asked on the first early
        session that logs in, or on a session of its own (without a path). A
        destination's reservations are read, and with the copy's ``hold`` key the LUN
        is held under it in the same round trip (see :meth:`_ask`); with
        ``receipts``, its receipts are armed there too where the session already
        knows the target is ours (a warm one)."""
        session = await self._first_early()
        if session is None:  # no stream's session logged in: one of its own
            session = self._own = await self._open(None)
        self._prober = session
        await self._ask(session, hold if self.destination else None, receipts)
        if not self.destination:
            await self._close_own()  # only a destination's is needed again (to hold it)

    async def _ask(self, session: Session, hold: int | None, receipts: bool = False) -> None:
        """Size, HASH RANGE, designator and (a destination) reservations at once; with
        ``hold``, the claim of the LUN beside them: the prober registers and reserves,
        the other early sessions that are in register, and those still logging in
        register once they are in (:meth:`_register_late`). The claim is judged later
        (:meth:`settle_hold`), and taken back if it must not stand. With ``receipts``,
        a session that learned over its login that the target is ours arms them too
        (a vendor-specific command goes to no target before that is known)."""
        lun = self.where.lun
        others = [s for s in self._early_in() if s is not session] if hold is not None else []
        if hold is not None:  # first: a failure leaves them so
            self._registered.update([session, *others])
        arm = receipts and _knows_ours(session, lun)
        if hold is not None:
            self._register_late(hold)
        facts, armed, claimed, *answers = await asyncio.gather(
            self._facts(session),
            arm_receipts(session, lun) if arm else _ready(False),
            claim(session, lun, hold) if hold is not None else _ready(None),
            *(pr_register(s, lun, hold) for s in others if hold is not None),
            return_exceptions=True,
        )
        self.holder = session if claimed is True else None  # the nexus holding it now
        try:
            if isinstance(facts, BaseException):
                raise facts
            if isinstance(armed, BaseException):
                raise armed
            if isinstance(claimed, BaseException):
                raise claimed
        except BaseException as exc:
            if no_such_lun(exc):  # no command reached a LUN: nothing to take back
                self._registered.clear()
            await self.unclaim()
            raise
        self._armed = armed is True
        if hold is not None:
            self._claim = (hold, claimed, others, answers)

    def _register_late(self, hold: int) -> None:
        """The early sessions not in at the probe register as soon as they are."""
        loop = asyncio.get_running_loop()
        for stream, (_, task) in self._early.items():
            if not task.done():
                registering = loop.create_task(self._register_when_in(task, hold))
                self._registering[stream] = (task, registering)

    async def _register_when_in(self, login: asyncio.Task[Session], hold: int) -> None:
        """Registers the session ``login`` gives under ``hold`` once it is in; a failure
        is left to its stream (which registers it then, and sees why)."""
        await asyncio.wait({login})
        if login.cancelled() or login.exception() is not None or self._claim_taken_back:
            return
        session = login.result()
        self._registered.add(session)
        with contextlib.suppress(InitiatorError, OSError, TimeoutError):
            await pr_register(session, self.where.lun, hold)
            self._holding.add(session)

    async def settle_hold(self) -> None:
        """Judges the probe's claim (:meth:`_ask`) once the copy's ends are known to be
        distinct devices: the LUN is then held under the copy's key, or the copy is
        refused (HoldError; the caller takes the claims back, :meth:`unclaim`)."""
        pending, self._claim = self._claim, None
        if pending is not None:
            await self._settle(*pending)

    @property
    def holds_reservation(self) -> bool:
        """Whether a session of this copy holds the LUN's reservation (its claim won)."""
        return self.holder is not None

    async def _facts(self, session: Session) -> None:
        lun = self.where.lun
        facts = await asyncio.gather(
            session.capacity(lun),
            supports_hash_range(session, lun),
            device_designator(session, lun),
            read_pr_state(session, lun) if self.destination else _ready(PrState()),
            _ready(None) if self.destination else remote_change_mark(session, lun),
            write_protected(session, lun) if self.destination else _ready(False),
        )
        (blocks, self.block_size), self.hashes, self.device, pr, mark, protected = facts
        self.mark, self.write_protected = mark, protected
        self.size = blocks * self.block_size
        self.pr_state = pr
        session.learned[(_OURS, lun)] = self.hashes

    async def _settle(
        self, key: int, claimed: bool | None, others: list[Session], answers: Sequence[object]
    ) -> None:
        """The LUN held under ``key`` (or refused, _hold.settle), as claimed by the
        prober and registered by ``others``; unheld where the target has no
        persistent reservations."""
        if claimed is None or not self.pr_state.supported:
            log.warning("%s: the target has no persistent reservations; it is not held", self.label)
            if claimed is None:
                self._registered.clear()  # nothing could register
            await self.unclaim()
            await self._close_own()  # (holding, it stays in: a target may need it, _hold)
            return
        resumed = settle(self.pr_state, key, claimed, self.label)
        self.hold, self.hold_kind = key, RESERVED
        # a resumed copy's holder was a session of the run before
        self.holder = None if resumed else self._prober
        ok = (s for s, answer in zip(others, answers, strict=True) if answer is None)
        self._holding.update(s for s in (self._prober, *ok) if s is not None)
        for session in self._holding:
            self.hold_watch.watch(session)
        log.info("%s held for the copy (reservation key 0x%016x)", self.label, key)

    async def unclaim(self) -> None:
        """Takes back the hold of a copy refused before its first write (_hold.unclaim):
        nothing of the refused copy stays on the LUN."""
        await self._stop_registering()
        if not self._registered:
            return
        lun = self.where.lun
        done = await unclaim(list(self._registered), self.holder, lun)
        self._registered.difference_update(done)
        self._holding.clear()
        self.hold, self.hold_kind, self.holder = None, "", None

    async def _stop_registering(self) -> None:
        """No session registers any more: those still logging in are let go, those
        whose REGISTER is out are waited for (they are in ``_registered`` already)."""
        self._claim_taken_back = True
        registering, self._registering = list(self._registering.values()), {}
        for login, task in registering:
            if not login.done():
                task.cancel()
        await asyncio.gather(*(task for _, task in registering), return_exceptions=True)

    async def arm_receipts(self) -> None:
        """Asks the target, on the session that probed it, to keep receipts of the
        copy's writes (where it hashes: only our target has receipts), unless the probe
        did."""
        assert self._prober is not None, "probe() first"
        if self.hashes and not self._armed:
            await arm_receipts(self._prober, self.where.lun)

    async def _check_writers(self, session: Session) -> None:
        """Before the first session that is not the holder writes: whether the target
        lets it, or the LUN must be held by registration only (see _hold)."""
        async with self._hold_lock:
            if self._writers_checked or self.hold is None:
                return
            if self.hashes:  # our target: every registrant writes, as SPC says
                self._writers_checked = True  # (tested there): no round trip to ask
                return
            lun = self.where.lun
            if not await writes_allowed(session, lun, self.block_size):
                if self.holder is None:
                    raise holder_gone(self.label, self.hold)
                await hold_by_registration(self.holder, lun, self.hold, self.label)
                self.hold_kind = REGISTERED
            self._writers_checked = True

    def _early_in(self) -> list[Session]:
        """The early sessions that logged in by now."""
        tasks = [task for _, task in self._early.values() if task.done()]
        return [t.result() for t in tasks if not t.cancelled() and t.exception() is None]

    async def _close_own(self) -> None:
        """Retires the session the side opened for itself to probe (no stream's)."""
        own, self._own = self._own, None
        if own is not None:
            with contextlib.suppress(InitiatorError, OSError, TimeoutError):
                await self.retire(own)

    async def _first_early(self) -> Session | None:
        """The first early session to log in; None if none did (their streams see
        why when they take them)."""
        pending = {task for _, task in self._early.values()}
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            ready = [t.result() for t in done if not t.cancelled() and t.exception() is None]
            if ready:  # one without a unit attention waiting where there is one (warm
                # sessions are all in at once): the probe then takes one round trip;
                # of those, one that knows the target is ours (it arms receipts there)
                lun = self.where.lun
                return min(ready, key=lambda s: (s.attention_expected, not _knows_ours(s, lun)))
        return None

    async def channel(self, stream: int, path: PathSpec | None) -> Channel:
        early = self._early.pop(stream, None)
        if early is not None and early[0] == path:
            session = await early[1]
        else:
            if early is not None:
                await _discard_early(early[1], self.retire)
            session = await self._open(path)
        registering = self._registering.pop(stream, None)
        if registering is not None:
            await registering[1]
        if self.hold is not None and session not in self._holding:
            self._registered.add(session)
            await pr_register(session, self.where.lun, self.hold)
            self._holding.add(session)
        if self.hold is not None:
            self.hold_watch.watch(session)
        if self.hold is not None and session is not self.holder:
            await self._check_writers(session)
        if self.login.on_session is not None:
            self.login.on_session(stream, session)
        home = self if self.login.pool is not None else None
        lun, bs = self.where.lun, self.block_size
        return RemoteChannel(session, lun, bs, self.hashes, self.hold, home=home)

    async def close(self) -> None:
        """Retires the early sessions no stream took (the copy stopped before), then
        gives the retired sessions back to the pool (see the module)."""
        await self._stop_registering()  # before a session that was to goes back
        await self.hold_watch.stop()
        early, self._early = self._early, {}
        await asyncio.gather(*(_discard_early(task, self.retire) for _, task in early.values()))
        await self._close_own()
        retired, self._retired = list(self._retired), {}
        await asyncio.gather(*(self._give_back(session) for session in retired))

    async def _give_back(self, session: Session) -> None:
        key = self._keys.pop(session)
        registered = session in self._registered and not self._cleared
        if self.login.pool is None or registered:
            with contextlib.suppress(InitiatorError, OSError, TimeoutError):
                await session.close()
        else:
            # the CLEAR left a unit attention (RESERVATIONS PREEMPTED) for the sessions
            # it did not come from: the next copy probes on another (_first_early)
            cleared = session in self._registered and session is not self._clearer
            session.attention_expected = cleared
            if self.hashes and not session.reinstatements:
                # the copy sent HASH RANGE on it, on the probe's word that the target
                # is ours: so may the next copy (not on one that logged in again)
                session.learned[(_OURS, self.where.lun)] = True
            await self.login.pool.put(key, session)


def _knows_ours(session: Session, lun: int) -> bool:
    """Whether ``session`` learned over its login that ``lun`` is served by our target
    with HASH RANGE (an earlier probe on it: :meth:`RemoteSide._facts`)."""
    return session.learned.get((_OURS, lun), False)


async def _ready(value: T) -> T:
    """``value``, as a coroutine beside others gathered (a question not asked)."""
    return value


async def _discard_early(
    task: asyncio.Task[Session], retire: Callable[[Session], Awaitable[None]]
) -> None:
    """Retires an early session no stream took (logged out, or kept for the pool).
    One still logging in gets ``EARLY_GRACE`` s to finish first: cut short, it would
    leave the target a reset connection instead of a logout."""
    try:
        done, _ = await asyncio.wait({task}, timeout=EARLY_GRACE)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        await asyncio.wait({task})
        return
    if task.cancelled() or task.exception() is not None:
        return  # it did not log in: nothing to close
    with contextlib.suppress(InitiatorError, OSError, TimeoutError):
        await retire(task.result())


async def open_source(
    text: str, login: Login, early: dict[int, PathSpec | None] | None = None
) -> Side:
    """The source; a remote one probed, with ``early`` streams logging in meanwhile."""
    where = parse_location(text)
    if isinstance(where, RemoteLun):
        return await _probed(
            RemoteSide(where, login, f"source LUN {where.lun} of {where.iqn}"), early
        )
    if not where.exists():
        raise EndpointError(f"source {where} does not exist")
    volume = await open_volume(where, read_only=True, direct=False)
    return LocalSide(volume, f"source {where}", where)


async def open_dest(
    text: str,
    login: Login,
    needed: int,
    early: dict[int, PathSpec | None] | None = None,
    *,
    mode: int = 0o600,
    hold: int | None = None,
    receipts: bool = False,
) -> Side:
    """The destination; a missing or smaller regular file is extended to ``needed``
    (a new one created with ``mode``); a remote one probed, with ``early`` streams
    logging in meanwhile, its reservations read and, given the copy's ``hold`` key,
    held under it in the same round trip (see _hold), its ``receipts`` armed there
    where that is known to be safe (:meth:`RemoteSide.probe`)."""
    where = parse_location(text)
    if isinstance(where, RemoteLun):
        side = RemoteSide(where, login, f"destination LUN {where.lun} of {where.iqn}", True)
        return await _probed(side, early, hold, receipts)
    _grow_file(where, needed, mode)
    return LocalSide(await open_volume(where, direct=False), f"destination {where}", where)


async def _probed(
    side: RemoteSide,
    early: dict[int, PathSpec | None] | None,
    hold: int | None = None,
    receipts: bool = False,
) -> RemoteSide:
    side.open_early(early or {})
    try:
        await side.probe(hold, receipts)
    except BaseException as exc:
        await side.close()
        if why := reach_failure(side.label, side.where, exc):
            raise (RemoteUnreachableError if may_pass(exc) else EndpointError)(why) from exc
        raise
    return side


def _grow_file(path: Path, needed: int, mode: int) -> None:
    try:
        if path.exists() and not stat.S_ISREG(path.stat().st_mode):
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, mode)
    except OSError as exc:
        raise EndpointError(f"cannot open destination {path}: {exc}") from exc
    try:
        if os.fstat(fd).st_size < needed:
            os.ftruncate(fd, needed)
    finally:
        os.close(fd)


async def remote_change_mark(session: Session, lun: int) -> ChangeMark | None:
    """A LUN's change mark, as its target keeps it (our target's VPD page C0h: the
    backing file's or device's, see reservoir.agent.storage._changes); None where the
    target keeps none."""
    mark = await change_mark(session, lun)
    return None if mark is None else ChangeMark(f"{mark[0]}, as its target reads them", mark[1])


def remote_rehasher(session: Session, lun: int, block_size: int, label: str) -> Rehasher:
    """A remote source on our target hashed again by its target (HASH RANGE), over
    ``session``: 16 bytes an extent cross the network, not the extent."""

    async def digest(offset: int, length: int) -> bytes | None:
        if length > MAX_HASH_BYTES:
            return None
        return await hash_range(session, lun, offset // block_size, length // block_size)

    async def mark() -> ChangeMark | None:
        return await remote_change_mark(session, lun)

    return Rehasher(label, mark, digest, REMOTE_REHASH_AT_ONCE)


def reread_rehasher(session: Session, lun: int, block_size: int, label: str) -> Rehasher:
    """A remote source whose target cannot hash (tgt, LIO) read again over ``session``
    and hashed here: every extent crosses the network a second time. Nothing tells a
    change of it, so its mark never moves."""

    async def digest(offset: int, length: int) -> bytes:
        hasher = xxhash.xxh3_128()
        for at in range(offset, offset + length, REREAD_PIECE):
            blocks = min(REREAD_PIECE, offset + length - at) // block_size
            hasher.update(await session.read(lun, at // block_size, blocks, block_size))
        return hasher.digest()

    async def mark() -> ChangeMark:
        return NO_MARK

    return Rehasher(label, mark, digest, REREAD_AT_ONCE)


def source_session(channel: Channel) -> tuple[Session, int] | None:
    """The session and LUN a channel reads a remote source through; None for a local one."""
    inner = channel.inner if isinstance(channel, CountingChannel) else channel
    return (inner.session, inner.lun) if isinstance(inner, RemoteChannel) else None


class CountingChannel:
    """A channel that counts the bytes of every completed command (path progress)."""

    def __init__(self, inner: Channel, count: Callable[[int], None]) -> None:
        self.inner, self.count = inner, count

    async def read(self, offset: int, length: int) -> bytes:
        data = await self.inner.read(offset, length)
        self.count(length)
        return data

    async def readinto(self, offset: int, view: memoryview) -> None:
        await self.inner.readinto(offset, view)
        self.count(len(view))

    async def write(self, offset: int, data: WriteData) -> None:
        await self.inner.write(offset, data)
        self.count(len(data))

    async def digest(self, offset: int, length: int) -> bytes | None:
        return await self.inner.digest(offset, length)

    async def receipt(self, offset: int, length: int) -> bytes | None:
        return await self.inner.receipt(offset, length)

    async def read_back(self, offset: int, length: int) -> bytes | None:
        return await self.inner.read_back(offset, length)

    async def flush(self) -> None:
        await self.inner.flush()

    async def release(self) -> None:
        await self.inner.release()

    async def close(self) -> None:
        await self.inner.close()


def pair_binds(binds: list[str], portals: list[tuple[str, int]]) -> list[PathSpec]:
    """``--bind LOCAL[/PREFIX]``: one path from each LOCAL to the portal on its subnet
    (/24 unless PREFIX is given); EndpointError if some LOCAL has none."""
    paths = []
    for bind in binds:
        local, _, prefix = bind.partition("/")
        try:
            net = ipaddress.ip_interface(f"{local}/{prefix or 24}").network
        except ValueError as exc:
            raise EndpointError(f"--bind {bind!r} is not LOCAL[/PREFIX]: {exc}") from exc
        match = [(host, port) for host, port in portals if _in(host, net)]
        if not match:
            listed = ", ".join(f"{h}:{p}" for h, p in portals) or "none"
            raise EndpointError(
                f"--bind {bind}: the target has no portal on {net} (its portals: {listed})"
            )
        paths.append(PathSpec(local, match[0][0], match[0][1]))
    return paths


def _in(host: str, net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    try:
        return ipaddress.ip_address(host) in net
    except ValueError:
        return False


async def resolve_binds(binds: list[str], where: RemoteLun, login: Login) -> list[PathSpec]:
    """Discover the portals of ``where``'s target (SendTargets) and pair the binds."""
    targets = await discover(
        where.host,
        where.port,
        initiator_name=login.initiator_name,
        chap=login.chap,
        mutual_chap=login.mutual_chap,
    )
    portals = [(p.address, p.port) for t in targets if t.name == where.iqn for p in t.portals]
    return pair_binds(binds, portals)
