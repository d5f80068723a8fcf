"""StorageError: the one exception type the storage engine raises for I/O problems.

::

    StorageError   errno, the operation, the volume's path (an OSError too, so code
                   written for the OS's errors reads it as one)
"""

from __future__ import annotations

import errno as errno_mod
import os

from reservoir.common.errors import ReservoirError


class StorageError(ReservoirError, OSError):
    """An error on a volume or engine.

    ``errno`` is set; the message names the operation, and ``filename`` (shown at
    the end of ``str()``) is the volume's path.  ``operation`` names the operation
    alone (``"read"``, ``"open"``, ...).
    """

    operation: str

    def __init__(self, err: int, message: str, path: str | None = None, operation: str = ""):
        if path is None:
            super().__init__(err, message)
        else:
            super().__init__(err, message, path)
        self.operation = operation


def storage_error(
    err: int, operation: str, path: str | None, detail: str | None = None
) -> StorageError:
    """A StorageError for ``operation`` on ``path`` failing with ``err``."""
    reason = os.strerror(err) if detail is None else detail
    return StorageError(err, f"{operation} failed: {reason}", path, operation)


def from_os_error(exc: OSError, operation: str, path: str | None) -> StorageError:
    """Wraps an OSError from a syscall (keeping its errno and text)."""
    if isinstance(exc, StorageError):
        return exc
    err = exc.errno if exc.errno is not None else errno_mod.EIO
    detail = exc.strerror or os.strerror(err)
    return storage_error(err, operation, path, detail)
