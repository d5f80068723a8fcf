"""The copy engine's errors: every way a copy fails reaches its caller as a
:class:`CopyError` whose message is one clear line. The engine translates the layers
below it (the initiator's, the protocol's, the storage engine's) into one, once, in
``_engine._copy_errors``.

::

    CopyError
     +-- PlanError           a range, extent size, stripe unit or stream count (_plan.py)
     +-- EndpointError       a source or destination that cannot be used (_endpoints.py)
     +-- CheckpointError     a checkpoint that cannot be read or does not fit (_checkpoint.py)
     +-- HoldError           a volume another copy holds (_hold.py)
     +-- VerifyError         an extent that did not verify after its retries (_stream.py)
     +-- SourceChangedError  a source written while it was copied (_source_watch.py)
     +-- RemoteUnreachableError  a remote side that could not be reached, or every
                                 stream to it lost: the same copy resumed later may go on
"""

from __future__ import annotations

from reservoir.common.errors import ReservoirError

__all__ = ["CopyError", "RemoteUnreachableError", "SourceChangedError"]


class CopyError(ReservoirError):
    """The copy failed; the message is one clear line."""


class SourceChangedError(CopyError):
    """The source was written while it was copied: the destination holds each extent
    as it was read, not the source as it is (see reservoir.agent.storage._changes)."""


class RemoteUnreachableError(CopyError):
    """A remote side's target could not be reached (refused, timed out, unroutable,
    busy), or every stream to it was lost and not recovered: nothing was wrong with
    the copy itself, and resuming it once the target answers again goes on from the
    checkpoint. A caller that resumes copies on its own (the coordinator) may retry."""
