"""SendTargets answers parsed into targets and portals (RFC 7143 §13.8, Appendix C)."""

from __future__ import annotations

from reservoir.agent.initiator import Portal
from reservoir.agent.initiator._discovery import parse_address, parse_send_targets


def test_parse_address_forms() -> None:
    assert parse_address("10.0.0.1:3261,2") == Portal("10.0.0.1", 3261, 2)
    assert parse_address("10.0.0.1") == Portal("10.0.0.1", 3260, 1)
    assert parse_address("[fe80::1]:3262,5") == Portal("fe80::1", 3262, 5)
    assert parse_address("[::1],7") == Portal("::1", 3260, 7)
    assert parse_address("host.example:3260,1") == Portal("host.example", 3260, 1)


def test_parse_send_targets_groups_portals_by_target() -> None:
    pairs = [
        ("TargetName", "iqn.a"),
        ("TargetAddress", "127.0.0.1:3260,1"),
        ("TargetAddress", "127.0.0.2:3261,1"),
        ("TargetName", "iqn.b"),
        ("TargetAddress", "[::1]:3260,2"),
    ]
    a, b = parse_send_targets(pairs)
    assert a.name == "iqn.a" and [p.port for p in a.portals] == [3260, 3261]
    assert b.name == "iqn.b" and b.portals == (Portal("::1", 3260, 2),)
    assert parse_send_targets([("TargetAddress", "1.2.3.4")]) == []
