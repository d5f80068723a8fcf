"""What ``GET /info`` tells about this host: storage backends, TCP congestion control, MPTCP."""

from __future__ import annotations

import os
from pathlib import Path

from reservoir.agent.control.models import VolumePublic
from reservoir.agent.storage import available_backends
from reservoir.agent.target.config import TargetConfig

__all__ = [
    "congestion_control",
    "mptcp_available",
    "slow_start_after_idle",
    "storage_backends",
    "volumes",
]

PROC_IPV4 = Path("/proc/sys/net/ipv4")
PROC_MPTCP = Path("/proc/sys/net/mptcp/enabled")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def congestion_control(proc: Path = PROC_IPV4) -> tuple[str | None, list[str]]:
    """The default algorithm and the ones available."""
    current = _read(proc / "tcp_congestion_control")
    available = (_read(proc / "tcp_available_congestion_control") or "").split()
    return current, available


def slow_start_after_idle(proc: Path = PROC_IPV4) -> bool | None:
    """Whether TCP shrinks an idle connection's window back (None: unknown)."""
    value = _read(proc / "tcp_slow_start_after_idle")
    return None if value is None else value != "0"


def mptcp_available(path: Path = PROC_MPTCP) -> bool:
    return _read(path) == "1"


def storage_backends() -> list[str]:
    return list(available_backends())


def _size(path: str) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


def volumes(config: TargetConfig | None) -> list[VolumePublic]:
    if config is None:
        return []
    return [
        VolumePublic(
            target=t.iqn, lun=lun.id, path=lun.path, size=_size(lun.path), read_only=lun.read_only
        )
        for t in config.targets
        for lun in t.luns
    ]
