"""Storage engine of the builtin iSCSI target: volumes read and written from asyncio.

Two backends do the I/O: "io_uring" (the C extension ``_uring`` over liburing,
with registered buffers, O_DIRECT for aligned requests and completions delivered
through an eventfd watched by the event loop) and "threads" (os.pread/os.pwrite
in a thread pool), used when io_uring is unavailable.  ``open_engine("auto")``
picks the first of ``available_backends()``; RESERVOIR_STORAGE_ENGINE=threads
forces the fallback.

    volume = await open_volume("/dev/loop0")
    data = await volume.read(0, 4096)

O_DIRECT writes through io_uring go from the caller's (page-aligned) buffer with no
copy; ``Volume.hash_range`` reads a range back (O_DIRECT where the volume's I/O
is) and hashes it in a worker thread, off the event loop.  ``Engine.counts`` adds up
what its volumes' requests did (:class:`IoCounts`).
"""

from ._base import BULK_WRITE, DirectIo, Engine
from ._changes import ChangeMark
from ._counts import IoCounts
from ._engine import available_backends, open_engine, opened_default_engine
from ._errors import StorageError
from ._identity import volume_identity
from ._read_back import buffer_bytes as read_back_buffer_bytes
from ._volume import Volume, open_volume

__all__ = [
    "BULK_WRITE",
    "ChangeMark",
    "DirectIo",
    "Engine",
    "IoCounts",
    "StorageError",
    "Volume",
    "available_backends",
    "open_engine",
    "open_volume",
    "opened_default_engine",
    "read_back_buffer_bytes",
    "volume_identity",
]
