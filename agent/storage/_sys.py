"""Blocking syscalls of the storage engine: open, sizes, fallocate, ioctls, extents.

Everything here runs in worker threads (or at open time) and raises OSError.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import os
import stat
import struct
from dataclasses import dataclass

log = logging.getLogger(__name__)

# <linux/fs.h>
BLKSSZGET = 0x1268  # _IO(0x12, 104): logical block size, int
BLKGETSIZE64 = 0x80081272  # _IOR(0x12, 114, size_t): size in bytes, u64
BLKDISCARD = 0x1277  # _IO(0x12, 119): u64[2] {offset, length}
BLKZEROOUT = 0x127F  # _IO(0x12, 127): u64[2] {offset, length}

# <linux/falloc.h>
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10

FILE_BLOCK_SIZE = 512
DEFAULT_DIRECT_ALIGN = 4096
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

_libc = ctypes.CDLL(None, use_errno=True)
_fallocate = _libc.fallocate
_fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_fallocate.restype = ctypes.c_int


@dataclass(slots=True)
class OpenedFiles:
    """What opening a volume found out."""

    fd: int
    dfd: int  # O_DIRECT descriptor, -1 without
    kind: str  # "file" | "block"
    size: int
    block_size: int
    align: int  # O_DIRECT alignment of offsets and lengths
    thin: bool


def fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    """fallocate(2); raises OSError."""
    if _fallocate(fd, mode, offset, length) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


SYNC_FILE_RANGE_WRITE = 2  # start writeback of the range's dirty pages, do not wait
_sync_file_range = _libc.sync_file_range
_sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
_sync_file_range.restype = ctypes.c_int


def sync_file_range(fd: int, offset: int, length: int, flags: int) -> None:
    """sync_file_range(2); raises OSError."""
    if _sync_file_range(fd, offset, length, flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def blk_range_ioctl(fd: int, request: int, offset: int, length: int) -> None:
    """BLKDISCARD / BLKZEROOUT on [offset, offset + length)."""
    fcntl.ioctl(fd, request, struct.pack("=QQ", offset, length))


def block_size_and_size(fd: int) -> tuple[int, int]:
    """(logical block size, size in bytes) of a block device."""
    (size,) = struct.unpack("=Q", fcntl.ioctl(fd, BLKGETSIZE64, bytes(8)))
    (bsize,) = struct.unpack("=i", fcntl.ioctl(fd, BLKSSZGET, bytes(4)))
    return int(bsize), int(size)


def current_size(fd: int) -> int:
    """The size in bytes of an open regular file or block device, now."""
    st = os.fstat(fd)
    if stat.S_ISBLK(st.st_mode):
        return block_size_and_size(fd)[1]
    return st.st_size


def _queue_attr(dev: int, name: str) -> int | None:
    """A /sys/dev/block/M:m queue attribute (partitions read their disk's)."""
    base = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    for path in (f"{base}/queue/{name}", f"{base}/../queue/{name}"):
        try:
            with open(path, encoding="ascii") as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            continue
    return None


def _file_punch_supported(fd: int, size: int) -> bool:
    """Probe PUNCH_HOLE beyond the end of the file, where it changes nothing."""
    start = -(-size // DEFAULT_DIRECT_ALIGN) * DEFAULT_DIRECT_ALIGN
    try:
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, start, DEFAULT_DIRECT_ALIGN)
    except OSError as exc:
        log.debug("punch-hole probe: %s", exc)
        return False
    return True


def _check_type(path: str, mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise OSError(errno.EISDIR, f"{path} is a directory, not a volume")
    if not (stat.S_ISREG(mode) or stat.S_ISBLK(mode)):
        raise OSError(errno.EINVAL, f"{path} is neither a regular file nor a block device")


def _open_direct(path: str, flags: int) -> int:
    """An O_DIRECT descriptor, or -1 where the filesystem refuses it (tmpfs, ...)."""
    try:
        return os.open(path, flags | os.O_DIRECT)
    except OSError as exc:
        log.debug("%s: no O_DIRECT (%s), buffered I/O only", path, exc)
        return -1


def _describe(fd: int, path: str, writable: bool) -> tuple[str, int, int, int, bool]:
    """(kind, size, block size, direct alignment, thin) of an open volume."""
    st = os.fstat(fd)
    _check_type(path, st.st_mode)
    if stat.S_ISBLK(st.st_mode):
        bsize, size = block_size_and_size(fd)
        thin = (_queue_attr(st.st_rdev, "discard_max_bytes") or 0) > 0
        return "block", size, bsize, direct_align(bsize), thin
    device_block = _queue_attr(st.st_dev, "logical_block_size") or DEFAULT_DIRECT_ALIGN
    thin = writable and _file_punch_supported(fd, st.st_size)
    return "file", st.st_size, FILE_BLOCK_SIZE, direct_align(device_block), thin


def direct_align(logical_block_size: int) -> int:
    """Alignment for O_DIRECT requests: whole pages, and whole device blocks.

    The kernel needs only device blocks, but then a direct write could share a
    page with a concurrent buffered write of a neighbouring block, and when that
    page is dirty again the kernel cannot drop it after the direct write (its
    "page cache invalidation failure" case): page-aligned direct I/O never shares
    a page with a request it does not overlap.
    """
    return max(logical_block_size, PAGE_SIZE)


def open_files(path: str, read_only: bool, direct: bool) -> OpenedFiles:
    """Opens a volume's descriptors (buffered, and O_DIRECT if wanted and possible)."""
    _check_type(path, os.stat(path).st_mode)  # before open(): a FIFO would block
    flags = (os.O_RDONLY if read_only else os.O_RDWR) | os.O_CLOEXEC
    fd = os.open(path, flags)
    try:
        kind, size, bsize, align, thin = _describe(fd, path, not read_only)
    except BaseException:
        os.close(fd)
        raise
    dfd = _open_direct(path, flags) if direct else -1
    return OpenedFiles(fd, dfd, kind, size, bsize, align, thin)


def file_extents(fd: int, offset: int, length: int) -> list[tuple[int, int, bool]]:
    """(offset, length, mapped) extents covering the range, from SEEK_DATA/SEEK_HOLE."""
    end = offset + length
    out: list[tuple[int, int, bool]] = []
    pos = offset
    while pos < end:
        data = _seek(fd, pos, os.SEEK_DATA, end)
        if data > pos:
            out.append((pos, data - pos, False))
            pos = data
        if pos >= end:
            break
        hole = _seek(fd, pos, os.SEEK_HOLE, end)
        hole = end if hole <= pos else hole  # the file changed under us
        out.append((pos, hole - pos, True))
        pos = hole
    return out


def _seek(fd: int, pos: int, whence: int, end: int) -> int:
    """lseek clipped to end; no data past EOF (ENXIO) counts as a hole to the end."""
    try:
        return min(os.lseek(fd, pos, whence), end)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return end
        if exc.errno == errno.EINVAL:  # filesystem without SEEK_DATA: all data
            return pos if whence == os.SEEK_DATA else end
        raise


def pread_full(fd: int, offset: int, length: int) -> bytes:
    """Exactly length bytes, retrying short reads; EOF first -> EIO."""
    data = os.pread(fd, length, offset)
    if len(data) == length:
        return data
    buf = bytearray(length)
    buf[: len(data)] = data
    preadinto_full(fd, offset + len(data), memoryview(buf)[len(data) :])
    return bytes(buf)


def preadinto_full(fd: int, offset: int, buf: memoryview) -> None:
    """Fills buf from offset, retrying short reads; EOF first -> EIO."""
    pos = 0
    while pos < len(buf):
        n = os.preadv(fd, [buf[pos:]], offset + pos)
        if n == 0:
            raise OSError(errno.EIO, "unexpected end of file")
        pos += n


def pwrite_full(fd: int, offset: int, data: memoryview) -> None:
    """Writes all of data at offset, retrying short writes."""
    pos = 0
    while pos < len(data):
        n = os.pwrite(fd, data[pos:], offset + pos)
        if n == 0:
            raise OSError(errno.EIO, "write made no progress")
        pos += n
