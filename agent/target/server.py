"""The builtin iSCSI target: portals, targets with their LUNs, sessions.

One portal group (tag 1) holds every portal, so an initiator may open
connections of one session on any of them (MC/S over several links).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import itertools
import logging
import socket
from dataclasses import dataclass

from reservoir.agent import scsi, storage
from reservoir.agent.buffers import BufferPool
from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.login import ChapSecret, LoginNegotiator, TargetPolicy
from reservoir.agent.iscsi.negotiation import TargetLimits
from reservoir.agent.target.config import (
    Chap,
    ConfigError,
    Target,
    TargetConfig,
    check_servable,
    describe_access,
    describe_portal,
    format_portal,
)
from reservoir.agent.target.connection import Connection
from reservoir.agent.target.counts import TargetCounts
from reservoir.agent.target.login_guard import LoginGuard
from reservoir.agent.target.session import Session

KEPT_BUFFERS_MAX = 512 << 20  # write buffers kept for reuse between bursts, at most
RECEIVE_ARENA = 256 << 20  # write data received straight into memory io_uring writes from
ARENA_CHUNK = 1 << 20  # one data segment each: MaxRecvDataSegmentLength and FirstBurstLength

log = logging.getLogger("reservoir.target")

TPGT = 1


@dataclass(frozen=True)
class Portal:
    host: str
    port: int

    @property
    def label(self) -> str:
        return format_portal(self.host, self.port)

    @property
    def wildcard(self) -> bool:
        return self.host in ("0.0.0.0", "::", "")


def _chap(chap: Chap | None) -> ChapSecret | None:
    return None if chap is None else ChapSecret(chap.user, chap.secret)


class Directory:
    """The login negotiator's view of the configured targets."""

    def __init__(self, server: TargetServer) -> None:
        self.server = server

    def target(self, name: str) -> TargetPolicy | None:
        target = self.server.config.target(name)
        return None if target is None else self.server.policy(target)

    def discovery_auth(self) -> tuple[ChapSecret | None, ChapSecret | None]:
        return None, None


SERVING_LIMITS = TargetLimits(max_recv_data_segment_length=1 << 20, first_burst_length=1 << 20)
"""What a served target accepts: 1 MiB data segments and unsolicited bursts, so a
1 MiB write travels in one PDU with no R2T round trip (which costs a whole RTT on a
long fat network).  Initiators that offer less negotiate down as usual."""


class TargetServer:
    def __init__(
        self,
        config: TargetConfig,
        *,
        limits: TargetLimits | None = None,
        nop_interval: float = 30.0,
        queue_depth: int = 128,
        engine: storage.Engine | None = None,
        mptcp: bool = False,
        login_timeout: float | None = None,
        max_pending_logins: int | None = None,
        max_pending_logins_per_address: int | None = None,
    ) -> None:
        """``login_timeout``: seconds from accept by which a connection must be in
        full feature phase (a discovery session: ended); ``max_pending_logins`` and
        ``max_pending_logins_per_address``: how many connections may be in login at
        once, in total and from one source address (see :mod:`.login_guard`); each
        the ``[server]`` setting of ``config`` unless given."""
        self.config = config
        self.limits = limits or SERVING_LIMITS
        self.nop_interval = nop_interval
        self.queue_depth = queue_depth
        self.tpgt = TPGT
        self.engine = engine
        self._own_engine: storage.Engine | None = None  # made by start() when none given
        self.mptcp = mptcp
        self.login_guard = LoginGuard(
            timeout=_given(login_timeout, config.login_timeout),
            max_pending=_given_int(max_pending_logins, config.max_pending_logins),
            max_per_address=_given_int(
                max_pending_logins_per_address, config.max_pending_logins_per_address
            ),
        )
        # Write data buffers, reused across connections; the bound follows the sessions.
        self.buffers = BufferPool(limit=0)
        self.directory = Directory(self)
        self.portals = [Portal(h, p) for h, p in config.portals]
        self.sessions: dict[int, Session] = {}
        self.connections: set[Connection] = set()
        # commands and bytes of each target's sessions, for the agent's metrics
        self.counts: dict[str, TargetCounts] = {t.iqn: TargetCounts() for t in config.targets}
        self.luns: dict[str, scsi.LunTable] = {}
        self._volumes: list[storage.Volume] = []
        self._servers: list[asyncio.Server] = []
        self._tsih = itertools.count(1)

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Opens the LUNs and listens; a configuration that admits no one, or has
        nothing to serve, is refused (ConfigError) before anything is opened."""
        check_servable(self.config)
        self._receive_into_arena()
        for target in self.config.targets:
            self.luns[target.iqn] = await self._open_luns(target)
            log.log(logging.WARNING if target.open else logging.INFO, describe_access(target))
        loop = asyncio.get_running_loop()
        for portal in self.portals:
            factory = functools.partial(Connection, self, portal)
            if self.mptcp:
                sock = mptcp_listener(portal.host, portal.port)
                server = await loop.create_server(factory, sock=sock)
            else:
                server = await loop.create_server(
                    factory, portal.host, portal.port, reuse_address=True
                )
            self._servers.append(server)
            where = describe_portal(portal.host, portal.port)
            log.info("listening on %s%s", where, " (MPTCP)" if self.mptcp else "")

    def _receive_into_arena(self) -> None:
        """Without an engine given, the target's own, with a registered arena: write
        data segments are received into its chunks and written from there by
        WRITE_FIXED, with no copy in between (on a 2 GiB copy through the page cache
        the copy into slot buffers was a tenth of the target's samples)."""
        if self.engine is None:
            self.engine = self._own_engine = storage.open_engine(arena=RECEIVE_ARENA)
        arena = self.engine.arena()
        if arena is not None:
            self.buffers.use_arena(arena, ARENA_CHUNK)

    async def _open_luns(self, target: Target) -> scsi.LunTable:
        units: dict[int, scsi.LogicalUnit] = {}
        for lun in target.luns:
            try:
                volume = await storage.open_volume(
                    lun.path, read_only=lun.read_only, engine=self.engine, direct=lun.direct_io
                )
            except storage.StorageError as exc:
                raise ConfigError(f"{target.iqn} LUN {lun.id}: {lun.path}: {exc.strerror}") from exc
            volume.writeback = True  # initiators write at network speed: keep the disk busy
            self._volumes.append(volume)
            units[lun.id] = scsi.LogicalUnit(
                volume,
                lun=lun.id,
                serial=_serial(target.iqn, lun.id),
                device_id=storage.volume_identity(lun.path),
                target_name=target.iqn,
                target_port_id=self.tpgt,
                read_only=lun.read_only,
            )
            log.info(
                "%s LUN %d: %s (%d bytes, %s, %s)",
                target.iqn,
                lun.id,
                lun.path,
                volume.size,
                volume.kind,
                "read-only" if lun.read_only else "read-write",
            )
        return scsi.LunTable(units)

    def bound_ports(self) -> list[int]:
        """The TCP ports actually bound (useful when a portal asked for port 0)."""
        ports: list[int] = []
        for server in self._servers:
            ports += [sock.getsockname()[1] for sock in server.sockets]
        return ports

    async def stop(self, grace: float = 1.0) -> None:
        """Ask every initiator to log out (async message), then close everything."""
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            if conn.session is not None and not conn.session.is_discovery:
                conn.send(_logout_request(grace))
        if self.connections and grace > 0:
            await asyncio.sleep(min(grace, 0.5))
        for conn in list(self.connections):
            conn.close("target stopping")
        for server in self._servers:
            await server.wait_closed()
        for volume in self._volumes:
            volume.close()
        if self._own_engine is not None:
            self._own_engine.close()

    # ------------------------------------------------------------ targets

    def policy(self, target: Target) -> TargetPolicy:
        return TargetPolicy(
            name=target.iqn,
            alias=target.alias,
            chap=_chap(target.chap),
            mutual_chap=_chap(target.mutual_chap),
            allowed_initiators=frozenset(target.allow),
            portals=tuple((p.host, p.port, self.tpgt) for p in self.portals),
        )

    def visible_targets(self, initiator: str) -> list[str]:
        return [t.iqn for t in self.config.targets if not t.allow or initiator in t.allow]

    def target_addresses(self, conn: Connection) -> list[str]:
        """TargetAddress values: every portal; a wildcard one as the address reached."""
        out = []
        for portal in self.portals:
            host = conn.local[0] if portal.wildcard else portal.host
            out.append(f"{format_portal(host, portal.port)},{self.tpgt}")
        return out

    # ------------------------------------------------------------ sessions

    def create_session(self, neg: LoginNegotiator, isid: bytes, cmdsn: int) -> Session:
        target_name = neg.target.name if neg.target is not None else None
        self._reinstate(neg.initiator_name or "", isid, target_name)
        tsih = self._new_tsih()
        nexus = luns = counts = None
        if target_name is not None:
            counts = self.counts.setdefault(target_name, TargetCounts())
            initiator = neg.initiator_name or ""
            nexus = scsi.Nexus(
                initiator_port=f"{initiator},i,0x{isid.hex()}",
                target_port=f"{target_name},t,0x{self.tpgt:04x}",
                initiator_name=initiator,
            )
            luns = self.luns[target_name]
        session = Session(
            tsih=tsih,
            isid=isid,
            initiator_name=neg.initiator_name or "",
            target_name=target_name,
            params=neg.session_params,
            nexus=nexus,
            luns=luns,
            exp_cmdsn=cmdsn,
            queue_depth=self.queue_depth,
            counts=counts,
        )
        self.sessions[tsih] = session
        self._bound_buffers()
        return session

    def _bound_buffers(self) -> None:
        """Keep for reuse as many write buffers as the sessions may have in flight: each
        session's CmdSN window (``queue_depth`` commands) of MaxBurstLength each, at
        most ``KEPT_BUFFERS_MAX`` (what many sessions with large bursts could hold at
        once is kept no longer than it is in use)."""
        normal = [s for s in self.sessions.values() if not s.is_discovery]
        wanted = sum(s.queue_depth * s.params.max_burst_length for s in normal)
        limit = min(wanted, KEPT_BUFFERS_MAX)
        if limit != self.buffers.limit:
            self.buffers.set_limit(limit)
            log.info(
                "write buffers: up to %d MiB kept for reuse (%d sessions x %d commands x "
                "MaxBurstLength); %d MiB kept now",
                limit >> 20,
                len(normal),
                self.queue_depth,
                self.buffers.held >> 20,
            )

    def _new_tsih(self) -> int:
        while True:
            tsih = next(self._tsih) & 0xFFFF
            if tsih and tsih not in self.sessions:
                return tsih

    def _reinstate(self, initiator: str, isid: bytes, target_name: str | None) -> None:
        """A new leading login with the ISID of a live session replaces it (RFC 7143 §6.3.5)."""
        for session in list(self.sessions.values()):
            same = (session.initiator_name, session.isid, session.target_name)
            if same == (initiator, isid, target_name):
                self.end_session(session, "session reinstatement")

    def sessions_of(self, target_name: str | None) -> list[Session]:
        return [s for s in self.sessions.values() if s.target_name == target_name]

    def end_session(self, session: Session, reason: str) -> None:
        if session.closed:
            return
        session.closed = True
        self.sessions.pop(session.tsih, None)
        self._bound_buffers()
        if session.luns is not None and session.nexus is not None:
            session.luns.nexus_lost(session.nexus)
        for conn in list(session.connections.values()):
            conn.close(reason)
        for task in list(session.tasks.values()):
            task.abort()
        log.info("session %#x of %s ended: %s", session.tsih, session.initiator_name, reason)

    def connection_gone(self, conn: Connection) -> None:
        session = conn.session
        if session is None:
            return
        session.remove_connection(conn)
        if not session.connections:
            self.end_session(session, "last connection closed")


IPPROTO_MPTCP = 262


def mptcp_listener(host: str, port: int) -> socket.socket:
    """A listening MPTCP socket: MPTCP initiators get subflows on every address the
    kernel's MPTCP endpoints announce, plain TCP initiators fall back to TCP."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM, IPPROTO_MPTCP)
    except OSError as exc:
        raise OSError(
            exc.errno, f"the kernel refuses MPTCP sockets ({exc.strerror}): net.mptcp.enabled=1?"
        ) from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _logout_request(grace: float) -> P.AsyncMessage:
    msg = P.AsyncMessage(event=P.AsyncEvent.LOGOUT_REQUEST, lun=bytes(8))
    msg.parameter3 = max(1, int(grace))  # Time2Wait-like: seconds to log out in
    return msg


def _given(value: float | None, setting: float) -> float:
    return setting if value is None else value


def _given_int(value: int | None, setting: int) -> int:
    return setting if value is None else value


def _serial(iqn: str, lun: int) -> str:
    """A unit serial number stable across restarts: derived from target and LUN."""
    return hashlib.sha1(f"{iqn}/{lun}".encode()).hexdigest()[:16]
