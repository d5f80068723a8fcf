"""The "threads" backend: blocking syscalls in a ThreadPoolExecutor.

Used where io_uring is not (no extension, ENOSYS/EPERM from io_uring_setup, or
RESERVOIR_STORAGE_ENGINE=threads).  It uses only the buffered descriptor: Python
buffers are not aligned for O_DIRECT, and page-cache reads suit the fallback.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor

from . import _sys
from ._base import Engine, Handle

MAX_WORKERS = 32


class ThreadEngine(Engine):
    """Runs each request as one blocking call on a pool of ``min(depth, 32)`` threads."""

    kind = "threads"

    def __init__(self, depth: int = 64):
        super().__init__(depth)
        self._pool = ThreadPoolExecutor(
            max_workers=min(depth, MAX_WORKERS), thread_name_prefix="storage-io"
        )

    def _blocking_executor(self) -> ThreadPoolExecutor:
        return self._pool

    def close(self) -> None:
        if not self._closed:
            self._pool.shutdown(wait=False)
        super().close()

    def _read(self, h: Handle, offset: int, length: int) -> Awaitable[bytes]:
        return self._call_fd(h, _sys.pread_full, offset, length)

    def _readinto(self, h: Handle, offset: int, buf: memoryview) -> Awaitable[None]:
        return self._call_fd(h, _sys.preadinto_full, offset, buf)

    def _write(self, h: Handle, offset: int, data: memoryview) -> Awaitable[None]:
        return self._call_fd(h, _sys.pwrite_full, offset, data)

    def _fdatasync(self, h: Handle) -> Awaitable[None]:
        return self._call_fd(h, os.fdatasync)

    def _fallocate(self, h: Handle, mode: int, offset: int, length: int) -> Awaitable[None]:
        return self._call_fd(h, _sys.fallocate, mode, offset, length)

    def _writeback(self, h: Handle, offset: int, length: int) -> Awaitable[None]:
        flags = _sys.SYNC_FILE_RANGE_WRITE
        return self._call_fd(h, _sys.sync_file_range, offset, length, flags)
