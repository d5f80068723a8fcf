"""The state of one logical unit shared by the command handlers."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from ._opcodes import commands_for
from ._receipts import Receipts
from ._reservations import Reservations
from ._sense import lba_out_of_range
from ._types import Backend, Nexus
from ._unit_attention import UnitAttentions

PHYSICAL_BLOCK = 4096
MAX_TRANSFER_BYTES = 8 << 20
OPTIMAL_TRANSFER_BYTES = 1 << 20
# One WRITE SAME covers at most 65535 blocks: libiscsi's WriteSame16.Unmap moves a
# 65536-block WRITE(16)/READ(16) through the LU whenever the limit allows that many.
MAX_WRITE_SAME_BLOCKS = 0xFFFF
MAX_COMPARE_AND_WRITE_BLOCKS = 255
MAX_UNMAP_DESCRIPTORS = 2048
UNLIMITED = 0xFFFFFFFF


@dataclass(slots=True)
class ModeState:
    """The changeable mode parameters (shared by all I_T nexuses, SPC-4 7.5)."""

    wce: bool
    d_sense: bool = False
    swp: bool = False
    default_wce: bool = True


@dataclass(frozen=True, slots=True)
class Identity:
    """What INQUIRY reports about the logical unit and its target."""

    lun: int
    naa: bytes
    serial: str
    vendor: str
    product: str
    revision: str
    target_name: str
    target_port_id: int


class WriteGate:
    """Lets ordinary writes run concurrently and COMPARE AND WRITE/ORWRITE run alone.

    Writers call :meth:`enter` / :meth:`leave` (O(1) when no exclusive section
    is active); :meth:`exclusive` waits for writes in flight to finish and holds
    new ones back until the read-modify-write is done (SBC-3 5.2: atomicity).
    """

    __slots__ = ("_idle", "_lock", "_open", "inflight")

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._open = asyncio.Event()
        self._open.set()
        self._idle: asyncio.Event | None = None
        self.inflight = 0

    @property
    def closed(self) -> bool:
        return not self._open.is_set()

    async def enter(self) -> None:
        while not self._open.is_set():
            await self._open.wait()
        self.inflight += 1

    def leave(self) -> None:
        self.inflight -= 1
        if self.inflight == 0 and self._idle is not None:
            self._idle.set()

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        async with self._lock:
            self._open.clear()
            try:
                while self.inflight:
                    self._idle = asyncio.Event()
                    await self._idle.wait()
                yield
            finally:
                self._idle = None
                self._open.set()


def derive_naa(seed: bytes) -> bytes:
    """A 16-byte NAA IEEE Registered Extended designator (NAA 6h, SPC-4 7.8.6.6.5).

    The IEEE company ID is left zero (none is registered for this target) and the
    100 vendor-specific bits come from a hash of ``seed``, so they are stable.
    """
    digest = int.from_bytes(hashlib.sha256(seed).digest()[:13], "big") & ((1 << 100) - 1)
    value = (0x6 << 124) | digest
    return value.to_bytes(16, "big")


def tpgt_of(nexus: Nexus, default: int) -> int:
    """The relative target port identifier: the TPGT in ``name,t,0x<TPGT>``."""
    _, sep, tail = nexus.target_port.rpartition(",t,0x")
    if not sep:
        return default
    try:
        return int(tail, 16) & 0xFFFF
    except ValueError:
        return default


class LuState:
    """Geometry, limits, identity and the mutable state of one logical unit."""

    def __init__(
        self,
        backend: Backend,
        identity: Identity,
        *,
        write_cache: bool,
        read_only: bool,
        ua_on_new_nexus: bool,
    ) -> None:
        self.backend = backend
        self.identity = identity
        self.block_size = backend.block_size
        self.num_blocks = backend.size // self.block_size
        self.thin = bool(backend.thin)
        self.read_only = read_only or bool(backend.read_only)
        # LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT stays 0 ("unknown"): the 4 KiB
        # alignment of the storage is advertised through the Block Limits
        # granularities instead (libiscsi's GetLBAStatus.UnmapSingle assumes 0).
        self.lbppbe = 0
        self.granularity = max(1, PHYSICAL_BLOCK // self.block_size)
        bs = self.block_size
        self.max_transfer = max(1, MAX_TRANSFER_BYTES // bs)
        self.optimal_transfer = max(1, OPTIMAL_TRANSFER_BYTES // bs)
        self.max_write_same = MAX_WRITE_SAME_BLOCKS
        self.max_compare_and_write = MAX_COMPARE_AND_WRITE_BLOCKS
        self.mode = ModeState(wce=write_cache, default_wce=write_cache)
        self.ua = UnitAttentions(on_new_nexus=ua_on_new_nexus)
        self.res = Reservations()
        self.gate = WriteGate()
        self.receipts = Receipts(self.block_size)
        self.ports: set[int] = {identity.target_port_id}
        self.commands = commands_for(self.thin)

    @property
    def write_protected(self) -> bool:
        return self.read_only or self.mode.swp

    def check_range(self, lba: int, blocks: int) -> None:
        """SBC-3 4.5: LBA OUT OF RANGE unless every block addressed exists."""
        if lba >= self.num_blocks or lba + blocks > self.num_blocks:
            raise lba_out_of_range()

    def port_of(self, nexus: Nexus) -> int:
        port = tpgt_of(nexus, self.identity.target_port_id)
        self.ports.add(port)
        return port

    def refresh_capacity(self) -> bool:
        """Re-reads the backend size; True when the capacity changed."""
        blocks = self.backend.size // self.block_size
        changed = blocks != self.num_blocks
        self.num_blocks = blocks
        return changed
