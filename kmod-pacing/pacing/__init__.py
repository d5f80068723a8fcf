"""The pacing component: per-NIC pacing, per-socket pacing, per-connection cwnd caps."""

from .caps import MECHANISM_BPF, MECHANISM_PACING, CapError, CwndCaps

__all__ = ["MECHANISM_BPF", "MECHANISM_PACING", "CapError", "CwndCaps"]
