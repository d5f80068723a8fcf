"""The host's NICs as ``GET /info`` reports them, from ``ip -j addr show`` and sysfs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from reservoir.agent.control.nics import host_nics, parse_ip_addr

IP_ADDR = [
    {"ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "mtu": 65536,
     "addr_info": [{"family": "inet6", "local": "::1", "scope": "host"},
                   {"family": "inet", "local": "127.0.0.1", "scope": "host"}]},
    {"ifname": "eth1", "flags": ["BROADCAST", "UP", "LOWER_UP"], "mtu": 9000,
     "addr_info": [{"family": "inet6", "local": "fe80::1", "scope": "link"},
                   {"family": "inet6", "local": "fd00::5", "scope": "global"},
                   {"family": "inet", "local": "10.0.0.5", "scope": "global"}]},
    {"ifname": "eth2", "flags": ["BROADCAST", "UP"], "mtu": 1500, "addr_info": []},
]  # fmt: skip


def test_addresses_ipv4_first_without_link_local_and_speeds_from_sysfs(tmp_path: Path) -> None:
    (tmp_path / "eth1").mkdir()
    (tmp_path / "eth1" / "speed").write_text("25000\n")
    (tmp_path / "eth2").mkdir()
    (tmp_path / "eth2" / "speed").write_text("-1\n")  # no carrier: the kernel's "unknown"
    lo, eth1, eth2 = parse_ip_addr(json.dumps(IP_ADDR), tmp_path)
    assert (lo.loopback, lo.up, lo.addresses, lo.speed_bps) == (
        True,
        True,
        ["127.0.0.1", "::1"],
        None,
    )
    assert eth1.addresses == ["10.0.0.5", "fd00::5"] and eth1.speed_bps == 25 * 10**9
    assert eth1.mtu == 9000 and eth1.up and not eth1.loopback
    assert eth2.speed_bps is None and not eth2.up  # UP without LOWER_UP: no carrier


def test_this_hosts_loopback_is_listed() -> None:
    nics = asyncio.run(host_nics())
    lo = next(n for n in nics if n.name == "lo")
    assert lo.loopback and "127.0.0.1" in lo.addresses
