"""Host tuning's errors. A setting the host refuses is reported, not raised past the
profile (the rest is still applied); a profile or state file that cannot be used
stops ``reservoir agent tune`` with its message (exit 2).

::

    TuningError
     +-- ProfileError       a profile that cannot be used, every problem named (_profile.py)
     +-- HostRefusedError   one setting the kernel or host refused (_host.py)
     +-- StateError         the state file of original values cannot be read or written
     +-- PersistError       the sysctl.d file cannot be written or is not ours (_persist.py)
"""

from __future__ import annotations

from reservoir.common.errors import ReservoirError

__all__ = ["TuningError"]


class TuningError(ReservoirError):
    """The root of host tuning's errors."""
