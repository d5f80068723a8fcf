"""The host's network interfaces as the kernel has them, for ``GET /info``: what a
coordinator registers the agent with instead of asking the operator to type it.

Addresses come from ``ip -j addr show`` (iproute2), speeds from
``/sys/class/net/NAME/speed`` (Mb/s; none for a loopback or a virtual device that does
not say)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from reservoir.agent.control.models import NicPublic

__all__ = ["SYS_NET", "host_nics", "parse_ip_addr"]

SYS_NET = Path("/sys/class/net")
log = logging.getLogger("reservoir.agent")


async def host_nics(sys_net: Path = SYS_NET) -> list[NicPublic]:
    """This network namespace's interfaces with their addresses; [] where ``ip`` fails."""
    try:
        proc = await asyncio.create_subprocess_exec(
            "ip", "-j", "addr", "show",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
    except OSError as exc:
        log.warning("cannot list the interfaces (ip -j addr show): %s", exc)
        return []
    if proc.returncode != 0:
        log.warning("ip -j addr show failed: %s", err.decode(errors="replace").strip())
        return []
    return parse_ip_addr(out.decode(), sys_net)


def parse_ip_addr(text: str, sys_net: Path = SYS_NET) -> list[NicPublic]:
    """The interfaces of ``ip -j addr show``'s output, with their speeds from ``sys_net``."""
    nics = []
    for link in json.loads(text or "[]"):
        name = link.get("ifname")
        if not isinstance(name, str):
            continue
        flags = link.get("flags") or []
        nics.append(
            NicPublic(
                name=name,
                addresses=_addresses(link.get("addr_info") or []),
                speed_bps=_speed(sys_net / name / "speed"),
                mtu=link.get("mtu") if isinstance(link.get("mtu"), int) else None,
                up="UP" in flags and "LOWER_UP" in flags,
                loopback="LOOPBACK" in flags,
            )
        )
    return nics


def _addresses(entries: list[Any]) -> list[str]:
    """Global and host-scope addresses, IPv4 first (link-local ones cannot be routed)."""
    found = [
        (entry.get("family") != "inet", entry["local"])
        for entry in entries
        if isinstance(entry, dict)
        and isinstance(entry.get("local"), str)
        and entry.get("scope") in ("global", "host")
    ]
    return [address for _, address in sorted(found, key=lambda pair: pair[0])]


def _speed(path: Path) -> int | None:
    """Bits per second, or None where the kernel gives none (EINVAL, -1, missing)."""
    try:
        mbps = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return mbps * 1_000_000 if mbps > 0 else None
