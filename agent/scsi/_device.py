"""Device-level commands: TEST UNIT READY, REQUEST SENSE, READ CAPACITY(10/16),
START STOP UNIT, PREVENT ALLOW MEDIUM REMOVAL, SYNCHRONIZE CACHE, PRE-FETCH."""

from __future__ import annotations

from ._cdb import truncate, u16, u32, u64
from ._disk import flush
from ._sense import NO_ADDITIONAL_SENSE, SenseKey, build_sense, invalid_field_in_cdb
from ._state import LuState
from ._types import ScsiCommand, ScsiResult, Status


async def test_unit_ready(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """The medium is always present and ready (no START STOP state is kept)."""
    return ScsiResult(Status.GOOD)


async def request_sense(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """REQUEST SENSE (SPC-4 6.39): a pending unit attention, else NO SENSE."""
    cdb = cmd.cdb
    if cdb[1] & 0xFE:
        raise invalid_field_in_cdb(1)
    code = st.ua.pop(cmd.nexus)
    key = SenseKey.NO_SENSE if code is None else SenseKey.UNIT_ATTENTION
    sense = build_sense(key, *(code or NO_ADDITIONAL_SENSE), descriptor=bool(cdb[1] & 0x01))
    return ScsiResult(Status.GOOD, truncate(sense, cdb[4]))


def _last_lba(st: LuState) -> int:
    return max(st.num_blocks - 1, 0)


async def read_capacity_10(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """READ CAPACITY(10) (SBC-3 5.15): FFFFFFFFh when the LBA needs 64 bits."""
    cdb = cmd.cdb
    if not cdb[8] & 0x01 and u32(cdb, 2):
        raise invalid_field_in_cdb(2)  # LOGICAL BLOCK ADDRESS without PMI
    last = min(_last_lba(st), 0xFFFFFFFF)
    return ScsiResult(Status.GOOD, last.to_bytes(4, "big") + st.block_size.to_bytes(4, "big"))


async def read_capacity_16(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """READ CAPACITY(16) (SBC-3 5.16) with LBPPBE, and LBPME/LBPRZ when thin."""
    data = bytearray(32)
    data[0:8] = _last_lba(st).to_bytes(8, "big")
    data[8:12] = st.block_size.to_bytes(4, "big")
    data[13] = st.lbppbe
    if st.thin:
        data[14] = 0xC0
    return ScsiResult(Status.GOOD, truncate(data, u32(cmd.cdb, 10)))


async def start_stop_unit(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """START STOP UNIT (SBC-3 5.25): a stop flushes the cache; the medium cannot be
    ejected (RMB=0), so LOEJ is an invalid field."""
    byte4 = cmd.cdb[4]
    if byte4 & 0x02:
        raise invalid_field_in_cdb(4, 1)
    if not byte4 & 0x01 and not byte4 & 0x04 and not byte4 >> 4:
        await flush(st)
    return ScsiResult(Status.GOOD)


async def prevent_allow_medium_removal(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """PREVENT ALLOW MEDIUM REMOVAL (SBC-3 5.11): accepted, nothing to lock."""
    if cmd.cdb[4] & 0x03 > 1:
        raise invalid_field_in_cdb(4, 1)
    return ScsiResult(Status.GOOD)


def _check_cached_range(st: LuState, lba: int, blocks: int) -> None:
    """SYNCHRONIZE CACHE / PRE-FETCH ranges; zero blocks means "to the end"."""
    st.check_range(lba, blocks)


async def synchronize_cache_10(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    cdb = cmd.cdb
    _check_cached_range(st, u32(cdb, 2), u16(cdb, 7))
    await flush(st)
    return ScsiResult(Status.GOOD)


async def synchronize_cache_16(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    cdb = cmd.cdb
    _check_cached_range(st, u64(cdb, 2), u32(cdb, 10))
    await flush(st)
    return ScsiResult(Status.GOOD)


async def pre_fetch_10(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """PRE-FETCH(10): GOOD (not CONDITION MET) since nothing is cached ahead."""
    cdb = cmd.cdb
    _check_cached_range(st, u32(cdb, 2), u16(cdb, 7))
    return ScsiResult(Status.GOOD)


async def pre_fetch_16(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    cdb = cmd.cdb
    _check_cached_range(st, u64(cdb, 2), u32(cdb, 10))
    return ScsiResult(Status.GOOD)
