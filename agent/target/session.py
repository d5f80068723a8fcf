"""An iSCSI session on the target side: its connections, the CmdSN window
and the ordered delivery of commands across connections (RFC 7143 §3.2.2).

Non-immediate commands are delivered in CmdSN order whatever connection
they came on (MC/S); commands ahead of ExpCmdSN wait in ``_held``; commands
outside the window are dropped as the RFC says.  Immediate commands are
delivered at once and do not advance ExpCmdSN.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from reservoir.agent.iscsi.pdu import Pdu, TaskAttr
from reservoir.agent.iscsi.serial import sn_add, sn_lt

if TYPE_CHECKING:
    from reservoir.agent.iscsi.negotiation import SessionParams
    from reservoir.agent.scsi import LunTable, Nexus
    from reservoir.agent.target.counts import TargetCounts
    from reservoir.agent.target.tasks import ScsiTask

log = logging.getLogger("reservoir.target")


class Deliverable(Protocol):
    """What a session hands ordered commands to: the connection they came on."""

    cid: int

    def deliver(self, pdu: Pdu) -> None: ...

    def close(self, reason: str) -> None: ...


@dataclass(eq=False)
class TaskOrdering:
    """SAM task attributes within a session's task set.

    SIMPLE tasks run concurrently; an ORDERED task starts when every older
    task has ended and holds back every newer one until it ends;
    HEAD OF QUEUE tasks start at once.  Tasks enter in CmdSN order, so
    :meth:`waits` (what a new task must wait for) followed by :meth:`track`
    (register it) keeps the order; both are O(1) for SIMPLE tasks.
    """

    _barrier: asyncio.Future[None] | None = None
    _active: set[asyncio.Future[None]] = field(default_factory=set)

    def waits(self, attr: int) -> list[asyncio.Future[None]]:
        if attr == TaskAttr.HEAD_OF_QUEUE:
            return []
        out = [] if self._barrier is None or self._barrier.done() else [self._barrier]
        if attr == TaskAttr.ORDERED:
            out += self._active
        return out

    @property
    def open_to_simple(self) -> bool:
        """No ORDERED task holds SIMPLE ones back."""
        return self._barrier is None or self._barrier.done()

    def track(self, attr: int, runner: asyncio.Future[None]) -> None:
        if attr == TaskAttr.ORDERED:
            self._barrier = runner
            self._active.clear()
        elif attr != TaskAttr.HEAD_OF_QUEUE:
            self._active.add(runner)
            runner.add_done_callback(self._active.discard)


@dataclass(eq=False)
class Session:
    tsih: int
    isid: bytes
    initiator_name: str
    target_name: str | None  # None for a discovery session
    params: SessionParams
    nexus: Nexus | None
    luns: LunTable | None
    exp_cmdsn: int
    queue_depth: int = 128
    connections: dict[int, Deliverable] = field(default_factory=dict)
    tasks: dict[int, ScsiTask] = field(default_factory=dict)
    _held: dict[int, tuple[Deliverable, Pdu]] = field(default_factory=dict)
    ordering: TaskOrdering = field(default_factory=TaskOrdering)
    closed: bool = False
    counts: TargetCounts | None = None  # its target's (None: a discovery session)

    @property
    def is_discovery(self) -> bool:
        return self.target_name is None

    @property
    def max_cmdsn(self) -> int:
        return sn_add(self.exp_cmdsn, self.queue_depth - 1)

    def in_window(self, cmdsn: int) -> bool:
        return not sn_lt(cmdsn, self.exp_cmdsn) and not sn_lt(self.max_cmdsn, cmdsn)

    def admit(self, conn: Deliverable, pdu: Pdu, cmdsn: int) -> None:
        """Deliver ``pdu`` now, later (held for order) or never (outside the window)."""
        if pdu.immediate:
            conn.deliver(pdu)
            return
        if not self.in_window(cmdsn):
            log.warning(
                "session %#x: CmdSN %d outside window [%d, %d], dropped",
                self.tsih,
                cmdsn,
                self.exp_cmdsn,
                self.max_cmdsn,
            )
            return
        if cmdsn != self.exp_cmdsn:
            self._held[cmdsn] = (conn, pdu)
            return
        self._advance(conn, pdu)
        while (held := self._held.pop(self.exp_cmdsn, None)) is not None:
            self._advance(*held)

    def take_next(self, pdu: Pdu, cmdsn: int) -> bool:
        """Consume ``cmdsn`` for a command handled at once on arrival: only when it
        is the next one expected and nothing is held for ordering."""
        if pdu.immediate or cmdsn != self.exp_cmdsn or self._held:
            return False
        self.exp_cmdsn = sn_add(self.exp_cmdsn, 1)
        return True

    def _advance(self, conn: Deliverable, pdu: Pdu) -> None:
        self.exp_cmdsn = sn_add(self.exp_cmdsn, 1)
        conn.deliver(pdu)

    def drop_held_from(self, conn: Deliverable) -> None:
        """A connection went away: forget what it sent that is still held."""
        for sn in [sn for sn, (c, _) in self._held.items() if c is conn]:
            del self._held[sn]

    def add_connection(self, conn: Deliverable) -> None:
        self.connections[conn.cid] = conn

    def remove_connection(self, conn: Deliverable) -> None:
        if self.connections.get(conn.cid) is conn:
            del self.connections[conn.cid]
        self.drop_held_from(conn)
        for task in [t for t in self.tasks.values() if t.conn is conn]:
            task.abort()
