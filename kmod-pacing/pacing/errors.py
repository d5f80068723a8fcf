"""Pacing's errors: what the kernel refused, or a state that does not allow the request.
The agent reports them per NIC and per stream (a copy goes on unpaced or uncapped,
and says so); ``reservoir`` commands print them.

::

    PacingError
     +-- DeviceNotFoundError   the interface or its namespace does not exist (_tc.py;
     |                         a LookupError too)
     +-- QdiscBusyError        the root qdisc is someone else's: left alone (_tc.py)
     +-- CapError              a cwnd cap that cannot be applied to a socket (caps.py)
     +-- BpfUnavailable        the cap program cannot be loaded or attached (_bpf.py)
     +-- NoRttSampleError      TCP_INFO has no srtt or MSS yet (_socket.py)
"""

from __future__ import annotations

from reservoir.common.errors import ReservoirError

__all__ = ["PacingError"]


class PacingError(ReservoirError):
    """A pacing request the kernel refused, or state that does not allow it."""
