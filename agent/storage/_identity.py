"""What a volume *is*, whatever path names it: the seed of its device identifier.

Two paths are the same volume when they reach the same file (device and inode) or the
same block device (its device number, whichever node or symlink names it). The seed
also names the host (``/etc/machine-id``), so files on two machines never collide.
The target derives its LUNs' NAA designator (INQUIRY VPD 0x83) from this seed, and a
copy derives the same NAA from a local path: a source that is the file behind its own
destination LUN is recognized as the same device.
"""

from __future__ import annotations

import os
import socket
import stat
from functools import cache
from pathlib import Path

__all__ = ["volume_identity"]

MACHINE_ID = Path("/etc/machine-id")


@cache
def _machine() -> str:
    try:
        return MACHINE_ID.read_text(encoding="ascii").strip() or socket.gethostname()
    except OSError:
        return socket.gethostname()


def volume_identity(path: str | os.PathLike[str]) -> bytes:
    """The identity seed of the volume at ``path`` (symlinks followed); OSError if it
    does not exist."""
    st = os.stat(path)
    if stat.S_ISBLK(st.st_mode):
        what = f"blk:{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    else:
        what = f"file:{st.st_dev}:{st.st_ino}"
    return f"reservoir-volume:{_machine()}:{what}".encode()
