"""Medium access: READ, WRITE, WRITE AND VERIFY, VERIFY, COMPARE AND WRITE and
ORWRITE (SBC-3 5). The READ/WRITE(10/16) handlers are the hot path: one struct
unpack, a range check and one backend call."""

from __future__ import annotations

import errno

from ._cdb import RW10, RW12, RW16, decode_rw6, u32, u64
from ._sense import (
    SPACE_ALLOCATION_FAILED_WRITE_PROTECT,
    UNRECOVERED_READ_ERROR,
    WRITE_ERROR,
    CheckConditionError,
    SenseKey,
    data_out_mismatch,
    invalid_field_in_cdb,
    lba_out_of_range,
    miscompare,
    write_protected,
)
from ._state import LuState
from ._types import Hasher, ScsiCommand, ScsiResult, Status

_GOOD = Status.GOOD
_PROTECT = 0xE0  # RDPROTECT / WRPROTECT / VRPROTECT / ORPROTECT: no protection information
_FUA = 0x08
_COMPARE_CHUNK = 4096
Buffer = bytes | bytearray | memoryview


def io_error(exc: OSError, code: tuple[int, int], lba: int) -> CheckConditionError:
    """Sense for a failed backend call; a full thin pool is SBC-3 4.7.3.7's 27/07."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return CheckConditionError(SenseKey.DATA_PROTECT, SPACE_ALLOCATION_FAILED_WRITE_PROTECT)
    return CheckConditionError(SenseKey.MEDIUM_ERROR, code, information=lba)


async def read_blocks(st: LuState, lba: int, blocks: int) -> bytes:
    bs = st.block_size
    try:
        return await st.backend.read(lba * bs, blocks * bs)
    except OSError as exc:
        raise io_error(exc, UNRECOVERED_READ_ERROR, lba) from exc


async def hash_blocks(st: LuState, lba: int, blocks: int, hasher: Hasher) -> None:
    """Feeds ``blocks`` blocks from ``lba``, read back from storage, to ``hasher``."""
    bs = st.block_size
    try:
        await st.backend.hash_range(lba * bs, blocks * bs, hasher)
    except OSError as exc:
        raise io_error(exc, UNRECOVERED_READ_ERROR, lba) from exc


async def store(st: LuState, lba: int, data: Buffer) -> None:
    """Writes whole blocks, as a shared (non-exclusive) user of the write gate."""
    gate = st.gate
    if gate.closed:
        await gate.enter()
    else:
        gate.inflight += 1
    change = st.receipts.begin(lba, len(data) // st.block_size)
    stored = False
    try:
        await st.backend.write(lba * st.block_size, data)
        stored = True
    except OSError as exc:
        raise io_error(exc, WRITE_ERROR, lba) from exc
    finally:
        st.receipts.end(change, data if stored and st.receipts.wants(len(data)) else None)
        gate.leave()


async def store_exclusive(st: LuState, lba: int, data: Buffer) -> None:
    """Writes inside :meth:`WriteGate.exclusive` (must not enter the gate again)."""
    change = st.receipts.begin(lba, len(data) // st.block_size)
    try:
        await st.backend.write(lba * st.block_size, data)
    except OSError as exc:
        raise io_error(exc, WRITE_ERROR, lba) from exc
    finally:
        st.receipts.end(change)


async def flush(st: LuState) -> None:
    try:
        await st.backend.flush()
    except OSError as exc:
        raise io_error(exc, WRITE_ERROR, 0) from exc


def first_difference(a: Buffer, b: Buffer) -> int | None:
    """Offset of the first byte where equally long ``a`` and ``b`` differ."""
    va, vb = memoryview(a), memoryview(b)
    if va == vb:
        return None
    for start in range(0, len(va), _COMPARE_CHUNK):
        x, y = va[start : start + _COMPARE_CHUNK], vb[start : start + _COMPARE_CHUNK]
        if x != y:
            diff = int.from_bytes(x, "big") ^ int.from_bytes(y, "big")
            return start + len(x) - 1 - (diff.bit_length() - 1) // 8
    return None


def whole_blocks(st: LuState, data: Buffer, blocks: int) -> Buffer:
    """The Data-Out bytes to write for ``blocks`` blocks.

    More data than the CDB asks for is ignored; less is written as far as it
    holds whole blocks (libiscsi iSCSIResiduals: an Expected Data Transfer Length
    below the SCSI transfer length writes only what was sent). A partial block
    cannot be written: that ends with INVALID FIELD IN COMMAND IU, writing nothing.
    """
    need = blocks * st.block_size
    have = len(data)
    if have == need:
        return data
    if have > need:
        return memoryview(data)[:need]
    if have % st.block_size:
        raise data_out_mismatch()
    return memoryview(data)[:have]


def _check(st: LuState, lba: int, blocks: int, length_at: int) -> None:
    if lba >= st.num_blocks or lba + blocks > st.num_blocks:
        raise lba_out_of_range()
    if blocks > st.max_transfer:
        raise invalid_field_in_cdb(length_at)


def _protect(st: LuState) -> None:
    if st.write_protected:
        raise write_protected(software=not st.read_only)


# -- READ ------------------------------------------------------------------------------


async def _read(st: LuState, lba: int, blocks: int, length_at: int) -> ScsiResult:
    if lba >= st.num_blocks or lba + blocks > st.num_blocks:
        raise lba_out_of_range()
    if not blocks:
        return ScsiResult(_GOOD)
    if blocks > st.max_transfer:
        raise invalid_field_in_cdb(length_at)
    bs = st.block_size
    try:
        data = await st.backend.read(lba * bs, blocks * bs)
    except OSError as exc:
        raise io_error(exc, UNRECOVERED_READ_ERROR, lba) from exc
    return ScsiResult(_GOOD, data)


async def read_6(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    lba, blocks = decode_rw6(cmd.cdb)
    return await _read(st, lba, blocks, 4)


async def read_10(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    flags, lba, blocks = RW10.unpack_from(cmd.cdb)
    if flags & _PROTECT:
        raise invalid_field_in_cdb(1, 7)
    return await _read(st, lba, blocks, 7)


async def read_12(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    flags, lba, blocks = RW12.unpack_from(cmd.cdb)
    if flags & _PROTECT:
        raise invalid_field_in_cdb(1, 7)
    return await _read(st, lba, blocks, 6)


async def read_16(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    flags, lba, blocks = RW16.unpack_from(cmd.cdb)
    if flags & _PROTECT:
        raise invalid_field_in_cdb(1, 7)
    return await _read(st, lba, blocks, 10)


# -- WRITE -----------------------------------------------------------------------------


async def _write(
    st: LuState, cmd: ScsiCommand, lba: int, blocks: int, *, fua: int, length_at: int
) -> ScsiResult:
    if lba >= st.num_blocks or lba + blocks > st.num_blocks:
        raise lba_out_of_range()
    if not blocks:
        return ScsiResult(_GOOD)
    if blocks > st.max_transfer:
        raise invalid_field_in_cdb(length_at)
    if st.write_protected:
        raise write_protected(software=not st.read_only)
    data = cmd.data_out
    if len(data) != blocks * st.block_size:
        data = whole_blocks(st, data, blocks)
        if not data:
            return ScsiResult(_GOOD)
    await store(st, lba, data)
    if fua or not st.mode.wce:
        await flush(st)
    return ScsiResult(_GOOD)


async def write_6(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    lba, blocks = decode_rw6(cmd.cdb)
    return await _write(st, cmd, lba, blocks, fua=0, length_at=4)


async def write_10(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    flags, lba, blocks = RW10.unpack_from(cmd.cdb)
    if flags & _PROTECT:
        raise invalid_field_in_cdb(1, 7)
    return await _write(st, cmd, lba, blocks, fua=flags & _FUA, length_at=7)


async def write_12(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    flags, lba, blocks = RW12.unpack_from(cmd.cdb)
    if flags & _PROTECT:
        raise invalid_field_in_cdb(1, 7)
    return await _write(st, cmd, lba, blocks, fua=flags & _FUA, length_at=6)


async def write_16(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    flags, lba, blocks = RW16.unpack_from(cmd.cdb)
    if flags & _PROTECT:
        raise invalid_field_in_cdb(1, 7)
    return await _write(st, cmd, lba, blocks, fua=flags & _FUA, length_at=10)


# -- WRITE AND VERIFY (SBC-3 5.37-5.39) ---------------------------------------------


def _write_verify_flags(flags: int) -> None:
    """WRPROTECT must be 0; BYTCHK 00b or 01b (the written data is what was sent)."""
    if flags & _PROTECT:
        raise invalid_field_in_cdb(1, 7)
    if (flags >> 1) & 0x03 > 1:
        raise invalid_field_in_cdb(1, 2)


async def write_and_verify_10(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    flags, lba, blocks = RW10.unpack_from(cmd.cdb)
    _write_verify_flags(flags)
    return await _write(st, cmd, lba, blocks, fua=1, length_at=7)


async def write_and_verify_12(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    flags, lba, blocks = RW12.unpack_from(cmd.cdb)
    _write_verify_flags(flags)
    return await _write(st, cmd, lba, blocks, fua=1, length_at=6)


async def write_and_verify_16(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    flags, lba, blocks = RW16.unpack_from(cmd.cdb)
    _write_verify_flags(flags)
    return await _write(st, cmd, lba, blocks, fua=1, length_at=10)


# -- VERIFY (SBC-3 5.33-5.35) ---------------------------------------------------------


async def _verify(
    st: LuState, cmd: ScsiCommand, flags: int, lba: int, blocks: int, *, length_at: int
) -> ScsiResult:
    """BYTCHK 00b reads the medium, 01b compares the Data-Out buffer, 11b compares
    one block of Data-Out with every block (SBC-4); 10b is reserved."""
    if flags & _PROTECT:
        raise invalid_field_in_cdb(1, 7)
    bytchk = (flags >> 1) & 0x03
    if bytchk == 2:
        raise invalid_field_in_cdb(1, 2)
    _check(st, lba, blocks, length_at)
    if not blocks:
        return ScsiResult(_GOOD)
    bs = st.block_size
    need = bs if bytchk == 3 else blocks * bs
    if bytchk and len(cmd.data_out) < need:
        raise data_out_mismatch()
    actual = await read_blocks(st, lba, blocks)
    if not bytchk:
        return ScsiResult(_GOOD)
    expected = memoryview(cmd.data_out)[:need]
    if bytchk == 3:
        expected = memoryview(bytes(expected) * blocks)
    offset = first_difference(actual, expected)
    if offset is not None:
        raise miscompare(offset)
    return ScsiResult(_GOOD)


async def verify_10(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    flags, lba, blocks = RW10.unpack_from(cmd.cdb)
    return await _verify(st, cmd, flags, lba, blocks, length_at=7)


async def verify_12(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    flags, lba, blocks = RW12.unpack_from(cmd.cdb)
    return await _verify(st, cmd, flags, lba, blocks, length_at=6)


async def verify_16(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    flags, lba, blocks = RW16.unpack_from(cmd.cdb)
    return await _verify(st, cmd, flags, lba, blocks, length_at=10)


# -- COMPARE AND WRITE (SBC-3 5.2), ORWRITE (SBC-3 5.8) -------------------------------


def _caw_blocks(st: LuState, cmd: ScsiCommand) -> tuple[int, int]:
    """(LBA, blocks) of a COMPARE AND WRITE whose CDB and Data-Out are valid."""
    cdb = cmd.cdb
    if cdb[1] & _PROTECT:
        raise invalid_field_in_cdb(1, 7)
    lba, blocks = u64(cdb, 2), cdb[13]
    if blocks > st.max_compare_and_write:
        raise invalid_field_in_cdb(13)
    st.check_range(lba, blocks)
    bs = st.block_size
    if not blocks:
        # Zero blocks is no error (SBC-3 5.2), but a Data-Out buffer holding at
        # least one compare/write pair says the 8-bit count overflowed.
        if len(cmd.data_out) >= 2 * bs:
            raise invalid_field_in_cdb(13)
        return lba, 0
    _protect(st)
    if len(cmd.data_out) != 2 * blocks * bs:
        raise data_out_mismatch()
    return lba, blocks


async def compare_and_write(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """Compares the first half of Data-Out with the medium and, when equal, writes
    the second half; atomic with respect to every other write of this LU."""
    lba, blocks = _caw_blocks(st, cmd)
    if not blocks:
        return ScsiResult(_GOOD)
    view = memoryview(cmd.data_out)
    length = blocks * st.block_size
    async with st.gate.exclusive():
        current = await read_blocks(st, lba, blocks)
        offset = first_difference(current, view[:length])
        if offset is not None:
            raise miscompare(offset)
        await store_exclusive(st, lba, view[length:])
    if cmd.cdb[1] & _FUA or not st.mode.wce:
        await flush(st)
    return ScsiResult(_GOOD)


async def orwrite_16(st: LuState, cmd: ScsiCommand) -> ScsiResult:
    """ORWRITE(16): medium := medium OR Data-Out, atomically (no BMOP support)."""
    cdb = cmd.cdb
    if cdb[1] & _PROTECT:
        raise invalid_field_in_cdb(1, 7)
    lba, blocks = u64(cdb, 2), u32(cdb, 10)
    _check(st, lba, blocks, 10)
    if not blocks:
        return ScsiResult(_GOOD)
    _protect(st)
    data = whole_blocks(st, cmd.data_out, blocks)
    blocks = len(data) // st.block_size
    if not blocks:
        return ScsiResult(_GOOD)
    async with st.gate.exclusive():
        current = await read_blocks(st, lba, blocks)
        merged = int.from_bytes(current, "big") | int.from_bytes(data, "big")
        await store_exclusive(st, lba, merged.to_bytes(len(data), "big"))
    if cdb[1] & _FUA or not st.mode.wce:
        await flush(st)
    return ScsiResult(_GOOD)
