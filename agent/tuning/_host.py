"""The host's knobs: /proc/sys files, links over rtnetlink, ethtool coalescing.

Every read or write that the kernel (or a missing tool) refuses raises
:class:`HostRefusedError` with the reason as the kernel gave it (``EACCES: Permission
denied``, the ``ethtool`` stderr, ...); nothing here lets an OSError or a
netlink error escape, so one refusal never stops the rest of a profile.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from reservoir.agent.tuning._errors import TuningError

SYSCTL_ROOT = Path("/proc/sys")
CC_KEY = "net.ipv4.tcp_congestion_control"
CC_AVAILABLE = "net.ipv4.tcp_available_congestion_control"
CC_ALLOWED = "net.ipv4.tcp_allowed_congestion_control"
ETHTOOL_TIMEOUT_S = 10.0


class HostRefusedError(TuningError):
    """One setting the kernel or the host refused; ``absent`` when the setting or
    value does not exist here (what an optional setting may skip)."""

    def __init__(self, reason: str, *, absent: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.absent = absent


def _errno_text(e: OSError) -> str:
    name = errno.errorcode.get(e.errno or 0, f"errno {e.errno}")
    return f"{name}: {e.strerror or os.strerror(e.errno or 0)}"


def same_value(a: str, b: str) -> bool:
    """Whether two sysctl/ethtool values are equal (the kernel prints tabs)."""
    return a.split() == b.split()


# ------------------------------------------------------------------ sysctl


class Sysctl:
    """Settings as files under ``root`` (``/proc/sys``; a plain tree in tests)."""

    def __init__(self, root: Path = SYSCTL_ROOT) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        return self.root / key.replace(".", "/")

    def read(self, key: str) -> str:
        try:
            return " ".join(self.path(key).read_text().split())
        except FileNotFoundError as e:
            raise HostRefusedError(
                f"{_errno_text(e)} (no such setting in this kernel or network namespace)",
                absent=True,
            ) from e
        except OSError as e:
            raise HostRefusedError(_errno_text(e)) from e

    def check(self, key: str, value: str) -> None:
        """The refusals that can be foreseen without writing (also for a dry run)."""
        path = self.path(key)
        try:
            mode = path.stat().st_mode
        except FileNotFoundError as e:
            raise HostRefusedError(
                f"{_errno_text(e)} (no such setting in this kernel or network namespace)",
                absent=True,
            ) from e
        except OSError as e:
            raise HostRefusedError(_errno_text(e)) from e
        if not mode & 0o222:
            # /proc/sys enforces the mode bits even for root: a global setting seen
            # from a child network namespace is 0444 there.
            raise HostRefusedError(
                f"EACCES: read-only here (mode {stat.S_IMODE(mode):04o}; e.g. a global "
                "setting seen from a child network namespace)"
            )
        if key == CC_KEY:
            available = self.read(CC_AVAILABLE).split()
            if value not in available:
                raise HostRefusedError(
                    f"the kernel has no congestion control {value!r} "
                    f"({CC_AVAILABLE}: {' '.join(available)})",
                    absent=True,
                )

    def _cc_hint(self) -> str:
        try:
            allowed = self.read(CC_ALLOWED)
        except HostRefusedError:
            allowed = "?"
        return f"a child network namespace may only choose from {CC_ALLOWED}: {allowed}"

    def write(self, key: str, value: str) -> None:
        self.check(key, value)
        try:
            fd = os.open(self.path(key), os.O_WRONLY | os.O_TRUNC)
        except OSError as e:
            raise HostRefusedError(_errno_text(e), absent=isinstance(e, FileNotFoundError)) from e
        try:
            os.write(fd, f"{value}\n".encode())
        except OSError as e:
            if e.errno == errno.ENOENT:  # e.g. default_qdisc naming a qdisc not built
                raise HostRefusedError(
                    f"{_errno_text(e)} (the kernel does not know the value {value!r})",
                    absent=True,
                ) from e
            if e.errno == errno.EPERM and key == CC_KEY:
                raise HostRefusedError(f"{_errno_text(e)} ({self._cc_hint()})") from e
            if e.errno == errno.EINVAL:
                raise HostRefusedError(f"{_errno_text(e)} (the kernel rejected {value!r})") from e
            raise HostRefusedError(_errno_text(e)) from e
        finally:
            os.close(fd)


# ------------------------------------------------------------------ links


@dataclass(frozen=True)
class LinkState:
    index: int
    mtu: int
    txqueuelen: int


class Links(Protocol):
    """MTU and transmit queue length of the interfaces of this namespace."""

    def lookup(self, ifname: str) -> LinkState | None: ...

    def set(self, ifname: str, *, mtu: int | None = None, txqueuelen: int | None = None) -> None:
        """Raises HostRefusedError."""
        ...

    def close(self) -> None: ...


class NetlinkLinks:
    """:class:`Links` over rtnetlink (pyroute2) in this process's namespace."""

    def __init__(self) -> None:
        self._ipr: Any = None

    def _conn(self) -> Any:
        if self._ipr is None:
            # Lazy: pyroute2 (0.13 s) loads when a link is tuned, not for sysctls alone.
            from pyroute2 import IPRoute  # type: ignore[import-untyped]  # noqa: PLC0415

            self._ipr = IPRoute()
        return self._ipr

    def lookup(self, ifname: str) -> LinkState | None:
        from pyroute2.netlink.exceptions import (  # type: ignore[import-untyped]  # noqa: PLC0415
            NetlinkError,
        )

        try:
            ipr = self._conn()
            found: list[int] = ipr.link_lookup(ifname=ifname)
            if not found:
                return None
            link = ipr.get_links(found[0])[0]
        except NetlinkError as e:
            raise HostRefusedError(_netlink_text(e)) from e
        except OSError as e:
            raise HostRefusedError(_errno_text(e)) from e
        return LinkState(
            index=int(found[0]),
            mtu=int(link.get_attr("IFLA_MTU")),
            txqueuelen=int(link.get_attr("IFLA_TXQLEN")),
        )

    def set(self, ifname: str, *, mtu: int | None = None, txqueuelen: int | None = None) -> None:
        from pyroute2.netlink.exceptions import NetlinkError  # noqa: PLC0415 - as in lookup()

        state = self.lookup(ifname)
        if state is None:
            raise HostRefusedError(f"ENODEV: no network device {ifname} here", absent=True)
        attrs: dict[str, int] = {}
        if mtu is not None:
            attrs["mtu"] = mtu
        if txqueuelen is not None:
            attrs["txqlen"] = txqueuelen
        try:
            self._conn().link("set", index=state.index, **attrs)
        except NetlinkError as e:
            raise HostRefusedError(_netlink_text(e)) from e
        except OSError as e:
            raise HostRefusedError(_errno_text(e)) from e

    def close(self) -> None:
        if self._ipr is not None:
            self._ipr.close()
            self._ipr = None


def _netlink_text(e: Any) -> str:
    code = int(getattr(e, "code", 0) or 0)
    name = errno.errorcode.get(code, f"errno {code}")
    return f"{name}: {os.strerror(code)}"


# ------------------------------------------------------------------ coalescing


class Coalescer(Protocol):
    """Interrupt coalescing of an interface (``ethtool -c/-C`` options)."""

    def read(self, ifname: str) -> dict[str, str]: ...

    def write(self, ifname: str, option: str, value: str) -> None: ...


# "Adaptive RX: off  TX: off" and "rx-usecs: 8" lines of ``ethtool -c``.
_ADAPTIVE = re.compile(r"Adaptive RX:\s*(\S+)\s+TX:\s*(\S+)")
_OPTION = re.compile(r"([a-z][a-z0-9-]*):\s*(\S+)\s*$")


def parse_coalesce(text: str) -> dict[str, str]:
    """``ethtool -c`` output as options; values the driver lacks (n/a) left out."""
    options: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        m = _ADAPTIVE.match(line)
        if m:
            for key, value in zip(("adaptive-rx", "adaptive-tx"), m.groups(), strict=True):
                if value in ("on", "off"):
                    options[key] = value
            continue
        m = _OPTION.match(line)
        if m and m.group(2) != "n/a":
            options[m.group(1)] = m.group(2)
    return options


@dataclass
class Ethtool:
    """:class:`Coalescer` through the ``ethtool`` command, if it is installed."""

    binary: str | None = field(default_factory=lambda: shutil.which("ethtool"))
    _cache: dict[str, dict[str, str]] = field(default_factory=dict)

    def _run(self, argv: list[str]) -> str:
        if self.binary is None:
            raise HostRefusedError("ethtool not installed (apt-get install ethtool)", absent=True)
        try:
            proc = subprocess.run(
                [self.binary, *argv],
                capture_output=True,
                text=True,
                timeout=ETHTOOL_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise HostRefusedError(f"ethtool {' '.join(argv)}: {e}") from e
        if proc.returncode != 0:
            detail = " ".join((proc.stderr.strip() or proc.stdout.strip()).split())
            detail = detail or f"exit status {proc.returncode}"
            absent = "not supported" in detail.lower()
            raise HostRefusedError(f"ethtool {argv[0]}: {detail}", absent=absent)
        return proc.stdout

    def read(self, ifname: str) -> dict[str, str]:
        if ifname not in self._cache:
            self._cache[ifname] = parse_coalesce(self._run(["-c", ifname]))
        return dict(self._cache[ifname])

    def write(self, ifname: str, option: str, value: str) -> None:
        self._cache.pop(ifname, None)
        self._run(["-C", ifname, option, value])


# ------------------------------------------------------------------ the host


def netns_inode() -> int:
    """The inode of this process's network namespace (its identity)."""
    return os.stat("/proc/self/ns/net").st_ino


@dataclass
class Host:
    """Where a profile is applied: one network namespace's knobs."""

    sysctl: Sysctl
    links: Links
    coalescer: Coalescer
    netns: int

    @classmethod
    def local(cls, sysctl_root: Path = SYSCTL_ROOT) -> Host:
        """This process's namespace (``ip netns exec NS reservoir ...`` for another)."""
        return cls(Sysctl(sysctl_root), NetlinkLinks(), Ethtool(), netns_inode())

    def close(self) -> None:
        self.links.close()
