"""The lab's errors: a lab that cannot be built here, a command or peer that failed, a
bench whose copy or transfer went wrong. ``reservoir lab`` and the benches print
them and exit non-zero after tearing down what they built.

::

    LabError                 a lab command that failed, or a lab that cannot be built here
     +-- SpecError           a lab spec that cannot be built, every problem a line (spec.py)
     +-- LoopUnavailable     loop devices cannot be used on this machine (loopdev.py)
     +-- PeerError           a peer process (tgt, iperf3, GridFTP, XRootD) failed (peers.py)
     +-- ForwardError        the forwarder cannot listen or start (forward.py)
     +-- TransferError       the coordinator refused a request or a transfer failed
     |                       (coord_site.py)
     +-- VmUnavailable       guests cannot be built or booted here (vm/image.py)
     +-- GuestCommandError   a command in a guest failed or timed out (vm/guest.py)
     +-- DemoError           what the demo needs is missing, or its transfer failed
     +-- StartBenchError     the agent refused a request or a copy failed (bench_start.py)
     +-- EqualizerBenchError the API refused a request or a transfer failed
                             (bench_equalizer.py)
"""

from __future__ import annotations

from reservoir.common.errors import ReservoirError

__all__ = ["LabError"]


class LabError(ReservoirError):
    """A lab command that failed, or a lab that cannot be built here; the root of the
    lab's errors."""
