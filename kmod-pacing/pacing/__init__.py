"""The pacing component: per-NIC pacing, per-socket pacing, per-connection cwnd caps.

- :mod:`.caps`: :class:`CwndCaps`, per-connection cwnd caps (a BPF sock_ops program
  setting TCP_BPF_SNDCWND_CLAMP, or SO_MAX_PACING_RATE = cap x MSS / srtt);
- :mod:`.nic`: per-NIC pacing through netlink (TBF by default, HTB, fq maxrate where
  the kernel has sch_fq), owned and removed by state files;
- :mod:`.ipg`: inter-packet gap (byte times) <-> rate, as the paper's IPG widening;
- :mod:`.plan`: a transfer's :class:`PacingPlan`, rates per NIC and per stream
  (:mod:`reservoir.common.pacing_plan`), applied to this host's NICs.
"""

from .caps import MECHANISM_BPF, MECHANISM_PACING, CapError, CwndCaps
from .ipg import E1000_MAX_GAP, PREAMBLE_AND_GAP, gap_from_rate, rate_from_gap
from .nic import (
    STATE_DIR,
    Applied,
    DeviceNotFoundError,
    PacingError,
    Qdisc,
    QdiscBusyError,
    cleanup_stale,
    fq_available,
)
from .nic import apply as apply_nic
from .nic import current as current_nic
from .nic import remove as remove_nic
from .plan import NicSpec, PacingPlan, StreamSpec

__all__ = [
    "E1000_MAX_GAP",
    "MECHANISM_BPF",
    "MECHANISM_PACING",
    "PREAMBLE_AND_GAP",
    "STATE_DIR",
    "Applied",
    "CapError",
    "CwndCaps",
    "DeviceNotFoundError",
    "NicSpec",
    "PacingError",
    "PacingPlan",
    "Qdisc",
    "QdiscBusyError",
    "StreamSpec",
    "apply_nic",
    "cleanup_stale",
    "current_nic",
    "fq_available",
    "gap_from_rate",
    "rate_from_gap",
    "remove_nic",
]
