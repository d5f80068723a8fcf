"""A profile's sysctl values kept across reboots: a file in ``/etc/sysctl.d`` that
systemd-sysctl (or ``sysctl --system``) applies at boot.

The file is :data:`FILE_NAME`; its first line is :data:`MARK`, so Reservoir replaces
or removes only a file it wrote. Optional settings (a key this kernel may lack) are
written with a leading ``-``, which systemd-sysctl reads as "ignore if missing".
sysctl.d applies to the host's own network namespace: a profile applied inside
another namespace cannot be made persistent this way, and is refused. The NIC
settings of a profile (MTU, queue length, coalescing) are not kept: they belong to
the interface's configuration (systemd-networkd, ifupdown), which the report says.
"""

from __future__ import annotations

from pathlib import Path

from reservoir.common.store import marked, write_atomic

from ._errors import TuningError
from ._profile import Profile

__all__ = [
    "FILE_NAME",
    "MARK",
    "SYSCTL_D",
    "PersistError",
    "other_netns",
    "persist",
    "unpersist",
]

SYSCTL_D = Path("/etc/sysctl.d")
FILE_NAME = "60-reservoir.conf"
MARK = "# written by reservoir agent tune --persist; removed by --revert"


class PersistError(TuningError):
    """The profile cannot be kept, or the file is not Reservoir's."""


def render(profile: Profile) -> str:
    lines = [MARK, f"# profile {profile.name} ({profile.source})"]
    for s in profile.sysctl:
        lines.append(f"{'-' if s.optional else ''}{s.key} = {s.value}")
    return "\n".join(lines) + "\n"


def persist(profile: Profile, directory: Path = SYSCTL_D, *, own_netns: bool = True) -> Path:
    """Writes the profile's sysctl values to ``directory``/FILE_NAME (atomically, 0644);
    its path. PersistError when run in another network namespace than the host's, when
    the profile sets no sysctl, or when a file of that name is not Reservoir's."""
    if not own_netns:
        raise PersistError(
            "--persist: sysctl.d applies at boot to the host's own network namespace, and "
            "this runs in another one"
        )
    if not profile.sysctl:
        raise PersistError(f"--persist: profile {profile.name} sets no sysctl")
    path = directory / FILE_NAME
    _check_ours(path)
    directory.mkdir(parents=True, exist_ok=True)
    try:
        write_atomic(path, render(profile).encode(), mode=0o644)
    except OSError as exc:
        raise PersistError(f"{path}: {exc.strerror}") from None
    return path


def unpersist(directory: Path = SYSCTL_D) -> Path | None:
    """Removes the file :func:`persist` wrote; its path, or None if there was none."""
    path = directory / FILE_NAME
    if not path.exists():
        return None
    _check_ours(path)
    path.unlink()
    return path


def _check_ours(path: Path) -> None:
    try:
        ours = marked(path, MARK)
    except OSError as exc:
        raise PersistError(f"{path}: {exc.strerror}") from None
    if ours is False:
        raise PersistError(f"{path} exists and was not written by Reservoir: left as it is")


def other_netns(
    inode: int, init: Path = Path("/proc/1/ns/net"), named: Path = Path("/run/netns")
) -> bool:
    """Whether the network namespace ``inode`` is not the host's own: not PID 1's, or
    (where PID 1's cannot be read, as in a container) one that ``ip netns`` named."""
    try:
        return init.stat().st_ino != inode
    except OSError:
        pass
    try:
        return any(entry.stat().st_ino == inode for entry in named.iterdir())
    except OSError:
        return False
