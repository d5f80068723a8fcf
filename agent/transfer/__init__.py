"""The transfer engine: ``reservoir copy`` of a volume or a byte range over parallel
iSCSI streams, with checkpoints, resume, per-extent xxh3-128 digests and read-back
verification; over several paths with per-path health and failover (``_paths``),
MPTCP sockets, and JSON-lines telemetry (``_telemetry``).

>>> summary = await copy("/srv/vol.img", "iscsi://10.0.0.2/iqn.2026-11.org.x:v/0",
...                      CopyOptions(streams=8))
"""

from reservoir.agent.transfer._caps import Capper, StreamCaps
from reservoir.agent.transfer._checkpoint import Checkpoint, CheckpointError, CopyKey
from reservoir.agent.transfer._endpoints import PathSpec, RemoteLun, parse_location, parse_path
from reservoir.agent.transfer._engine import CopyOptions, JumpStart, copy, release
from reservoir.agent.transfer._errors import CopyError, RemoteUnreachableError, SourceChangedError
from reservoir.agent.transfer._paths import PathReport
from reservoir.agent.transfer._plan import (
    MIN_EXTENT_SIZE,
    Extent,
    Plan,
    PlanError,
    Queues,
    ServerPair,
    make_plan,
)
from reservoir.agent.transfer._progress import Progress, ProgressPrinter
from reservoir.agent.transfer._stream import StreamStats
from reservoir.agent.transfer._summary import CopySummary, PathStats, format_summary, root_hash

__all__ = [
    "MIN_EXTENT_SIZE",
    "Capper",
    "Checkpoint",
    "CheckpointError",
    "CopyError",
    "CopyKey",
    "CopyOptions",
    "CopySummary",
    "Extent",
    "JumpStart",
    "PathReport",
    "PathSpec",
    "PathStats",
    "Plan",
    "PlanError",
    "Progress",
    "ProgressPrinter",
    "Queues",
    "RemoteLun",
    "RemoteUnreachableError",
    "ServerPair",
    "SourceChangedError",
    "StreamCaps",
    "StreamStats",
    "copy",
    "format_summary",
    "make_plan",
    "parse_location",
    "parse_path",
    "release",
    "root_hash",
]
