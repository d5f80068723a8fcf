"""Logical block provisioning: UNMAP (SBC-3 5.28), WRITE SAME (SBC-3 5.40-5.41)
and GET LBA STATUS (SBC-3 5.4)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from ._cdb import truncate, u16, u32, u64
from ._disk import flush, io_error, store
from ._sense import (
    WRITE_ERROR,
    data_out_mismatch,
    invalid_field_in_cdb,
    invalid_field_in_parameters,
    lba_out_of_range,
    parameter_list_length_error,
    write_protected,
)
from ._state import MAX_UNMAP_DESCRIPTORS, LuState
from ._types import ScsiCommand, ScsiResult, Status

MAPPED = 0
DEALLOCATED = 1
PATTERN_CHUNK_BYTES = 1 << 20
STATUS_WINDOW_BYTES = 1 << 30
MAX_DESCRIPTOR_BLOCKS = 0xFFFFFFFF


def _protect(st: LuState) -> None:
    if st.write_protected:
        raise write_protected(software=not st.read_only)


async def discard(st: LuState, lba: int, blocks: int) -> None:
    """Deallocates blocks; they read back as zeros afterwards (LBPRZ)."""
    await _zero_blocks(st, st.backend.discard, lba, blocks)


async def write_zeroes(st: LuState, lba: int, blocks: int) -> None:
    await _zero_blocks(st, st.backend.write_zeroes, lba, blocks)


async def _zero_blocks(
    st: LuState, call: Callable[[int, int], Awaitable[None]], lba: int, blocks: int
) -> None:
    """``call`` (discard or write zeroes) over whole blocks, as a user of the write gate."""
    bs = st.block_size
    await st.gate.enter()
    change = st.receipts.begin(lba, blocks)
    try:
        await call(lba * bs, blocks * bs)
    except OSError as exc:
        raise io_error(exc, WRITE_ERROR, lba) from exc
    finally:
        st.receipts.end(change)
        st.gate.leave()


async def write_pattern(st: LuState, lba: int, blocks: int, pattern: bytes) -> None:
    """Writes one block's ``pattern`` to every block, a megabyte at a time."""
    size = len(pattern)
    per_chunk = max(1, PATTERN_CHUNK_BYTES // size)
    chunk = memoryview(pattern * min(per_chunk, blocks))
    while blocks:
        count = min(per_chunk, blocks)
        await store(st, lba, chunk[: count * size])
        lba += count
        blocks -= count


# -- UNMAP ----------------------------------------------------------------------------


def unmap_ranges(st: LuState, data: memoryview) -> list[tuple[int, int]]:
    """The (LBA, blocks) ranges of an UNMAP parameter list, all validated first."""
    if len(data) < 8:
        raise parameter_list_length_error()
    length = u16(data, 2)
    if 8 + length > len(data):
        raise parameter_list_length_error()
    count = length // 16
    if count > MAX_UNMAP_DESCRIPTORS:
        raise invalid_field_in_parameters(2)
    ranges: list[tuple[int, int]] = []
    for pos in range(8, 8 + 16 * count, 16):
        lba, blocks = u64(data, pos), u32(data, pos + 8)
        if lba + blocks > st.num_blocks:
            raise lba_out_of_range()
        if blocks:
            ranges.append((lba, blocks))
    return ranges


async def unmap(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """UNMAP: every descriptor is checked before any block is deallocated."""
    cdb = cmd.cdb
    if cdb[1] & 0x01:
        raise invalid_field_in_cdb(1, 0)  # ANCHOR: anchored state is not supported
    length = u16(cdb, 7)
    _protect(st)
    if not length:
        return ScsiResult(Status.GOOD)
    for lba, blocks in unmap_ranges(st, memoryview(cmd.data_out)[:length]):
        await discard(st, lba, blocks)
    return ScsiResult(Status.GOOD)


# -- WRITE SAME -----------------------------------------------------------------------


def _write_same_checks(st: LuState, flags: int, lba: int, blocks: int, length_at: int) -> None:
    if flags & 0xE0:
        raise invalid_field_in_cdb(1, 7)  # WRPROTECT: no protection information
    if flags & 0x10:
        raise invalid_field_in_cdb(1, 4)  # ANCHOR: ANC_SUP is 0
    if flags & 0x06:
        raise invalid_field_in_cdb(1, 2)  # PBDATA / LBDATA are not supported
    st.check_range(lba, blocks)
    if not blocks or blocks > st.max_write_same:
        raise invalid_field_in_cdb(length_at)  # WSNZ=1, MAXIMUM WRITE SAME LENGTH
    _protect(st)
    if flags & 0x08 and not st.thin:
        raise invalid_field_in_cdb(1, 3)  # UNMAP needs LBPWS / LBPWS10


async def _write_same(
    st: LuState, cmd: ScsiCommand, flags: int, lba: int, blocks: int, *, length_at: int, ndob: bool
) -> ScsiResult:
    _write_same_checks(st, flags, lba, blocks, length_at)
    pattern = b""
    if not ndob:
        if len(cmd.data_out) != st.block_size:
            raise data_out_mismatch()
        pattern = bytes(cmd.data_out)
    if pattern.count(0) == len(pattern):
        if flags & 0x08:
            await discard(st, lba, blocks)
        else:
            await write_zeroes(st, lba, blocks)
    else:
        await write_pattern(st, lba, blocks, pattern)
    if not st.mode.wce:
        await flush(st)
    return ScsiResult(Status.GOOD)


async def write_same_10(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    cdb = cmd.cdb
    if cdb[1] & 0x01:
        raise invalid_field_in_cdb(1, 0)
    return await _write_same(st, cmd, cdb[1], u32(cdb, 2), u16(cdb, 7), length_at=7, ndob=False)


async def write_same_16(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    cdb = cmd.cdb
    return await _write_same(
        st, cmd, cdb[1] & 0xFE, u64(cdb, 2), u32(cdb, 10), length_at=10, ndob=bool(cdb[1] & 1)
    )


# -- GET LBA STATUS -------------------------------------------------------------------


def provisioning_runs(
    extents: Iterable[tuple[int, int, bool]], start: int, end: int, block_size: int
) -> list[tuple[int, int, int]]:
    """(LBA, blocks, status) runs covering blocks [start, end).

    A block is mapped when any byte of it lies in a mapped extent; bytes not
    covered by any extent are deallocated.
    """
    spans: list[tuple[int, int]] = []
    for offset, length, mapped in sorted(extents):
        if not mapped or length <= 0:
            continue
        first = max(start, offset // block_size)
        last = min(end, -(-(offset + length) // block_size))
        if first >= last:
            continue
        if spans and first <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], last))
        else:
            spans.append((first, last))
    runs: list[tuple[int, int, int]] = []
    pos = start
    for first, last in spans:
        if first > pos:
            runs.append((pos, first - pos, DEALLOCATED))
        runs.append((first, last - first, MAPPED))
        pos = last
    if pos < end:
        runs.append((pos, end - pos, DEALLOCATED))
    return runs


async def _runs(st: LuState, lba: int) -> list[tuple[int, int, int]]:
    end = min(st.num_blocks, lba + max(1, STATUS_WINDOW_BYTES // st.block_size))
    if not st.thin:
        return [(lba, min(end - lba, MAX_DESCRIPTOR_BLOCKS), MAPPED)]
    bs = st.block_size
    try:
        extents = await st.backend.mapped_extents(lba * bs, (end - lba) * bs)
    except OSError:
        return [(lba, end - lba, MAPPED)]  # 000b also means "unknown" (SBC-3 table 44)
    return provisioning_runs(extents, lba, end, bs)


async def get_lba_status(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """GET LBA STATUS: descriptors from the starting LBA on, as many as fit."""
    cdb = cmd.cdb
    lba, alloc = u64(cdb, 2), u32(cdb, 10)
    if lba >= st.num_blocks:
        raise lba_out_of_range()
    wanted = max(1, (alloc - 8) // 16)
    body = b"".join(
        first.to_bytes(8, "big") + count.to_bytes(4, "big") + bytes((status, 0, 0, 0))
        for first, count, status in (await _runs(st, lba))[:wanted]
    )
    data = (len(body) + 4).to_bytes(4, "big") + bytes(4) + body
    return ScsiResult(Status.GOOD, truncate(data, alloc))
