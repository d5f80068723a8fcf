"""Lab specs: the examples parse, and every mistake is reported by field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from reservoir.lab.spec import SpecError, load, parse

CONFIG = Path(__file__).resolve().parents[2] / "config" / "lab"

GOOD: dict[str, Any] = {
    "host": [{"name": "a"}, {"name": "b"}],
    "link": [
        {
            "name": "l1",
            "a": "a",
            "b": "b",
            "a_addr": "10.201.1.1/24",
            "b_addr": "10.201.1.2/24",
            "rate_mbit": 500,
            "delay_ms": 50,
        }
    ],
}


def errors_of(change: dict[str, Any], where: str = "link") -> str:
    data = copy.deepcopy(GOOD)
    data[where][0].update(change)
    with pytest.raises(SpecError) as info:
        parse(data)
    return str(info.value)


def test_examples_parse() -> None:
    two = load(CONFIG / "lfn-2x500m-100ms.toml")
    assert [h.name for h in two.hosts] == ["src", "dst"]
    assert [(lk.name, lk.rate_mbit, lk.delay_ms) for lk in two.links] == [
        ("l1", 500, 50),
        ("l2", 500, 50),
    ]
    direct = load(CONFIG / "direct.toml")
    assert not direct.links[0].delayed


def test_defaults() -> None:
    data = copy.deepcopy(GOOD)
    del data["link"][0]["rate_mbit"], data["link"][0]["delay_ms"]
    link = parse(data).links[0]
    assert link.line == "dline"
    assert (link.rate_mbit, link.delay_ms, link.loss, link.queue_bytes, link.mtu) == (
        0,
        0,
        0,
        0,
        1500,
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rate_mbit": -5}, "link[0] (l1).rate_mbit: must be in [0, 100000], got -5"),
        ({"delay_ms": "50"}, "link[0] (l1).delay_ms: must be a number"),
        ({"loss": 1.0}, "link[0] (l1).loss: must be in [0, 0.99]"),
        ({"mtu": 1500.5}, "link[0] (l1).mtu: must be an integer"),
        ({"queue_bytes": True}, "link[0] (l1).queue_bytes: must be an integer"),
        ({"b": "c"}, "link[0] (l1).b: must name a host, got 'c'"),
        ({"b": "a"}, "link[0] (l1): a and b must be different hosts"),
        ({"a_addr": "10.201.1.1"}, "link[0] (l1).a_addr: must be an address with a prefix"),
        ({"a_addr": "10.201.1.300/24"}, "link[0] (l1).a_addr: "),
        ({"a_addr": "8.8.8.8/24"}, "link[0] (l1).a_addr: must be a private address"),
        ({"b_addr": "10.201.2.2/24"}, "are not in the same subnet"),
        ({"b_addr": "10.201.1.1/24"}, "are the same address 10.201.1.1"),
        ({"name": "this-name-is-far-too-long"}, "link[0] (this-name-is-far-too-long).name"),
        ({"dealy_ms": 5}, "link[0] (l1).dealy_ms: unknown field"),
        ({"line": "tc"}, "link[0] (l1).line: must be one of dline, netem, got 'tc'"),
    ],
)
def test_link_errors(change: dict[str, Any], message: str) -> None:
    assert message in errors_of(change)


def test_host_errors() -> None:
    assert "host[0].name: must match" in errors_of({"name": "A b"}, "host")
    assert "host[0].cpu: unknown field" in errors_of({"cpu": 1}, "host")
    data = copy.deepcopy(GOOD)
    data["host"].append({"name": "a"})
    data["link"].append(dict(data["link"][0]))
    with pytest.raises(SpecError) as info:
        parse(data)
    assert "host: duplicate names: a" in str(info.value)
    assert "link: duplicate names: l1" in str(info.value)


def test_every_error_is_reported_at_once() -> None:
    text = errors_of({"rate_mbit": -1, "loss": 2, "b": "zz"})
    assert len(text.splitlines()) == 3


def test_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[host]\n")
    with pytest.raises(SpecError, match=r"bad.toml: not valid TOML"):
        load(bad)
    with pytest.raises(SpecError, match="cannot read"):
        load(tmp_path / "missing.toml")
    bad.write_text('[[host]]\nname = "a"\n[nets]\n')
    with pytest.raises(SpecError, match="unknown top-level keys: nets") as info:
        load(bad)
    assert "link: at least one [[link]] is needed" in str(info.value)


# A router r between src and dst, dst with two extra addresses on its loopback.
ROUTED: dict[str, Any] = {
    "host": [
        {"name": "src"},
        {"name": "r", "forward": True},
        {"name": "dst", "addrs": ["10.206.8.2/32", "fd00:206::8/128"]},
    ],
    "link": [
        {"name": "l1", "a": "src", "b": "r", "a_addr": "10.206.1.1/24", "b_addr": "10.206.1.2/24"},
        {"name": "b", "a": "r", "b": "dst", "a_addr": "10.206.3.1/24", "b_addr": "10.206.3.2/24"},
    ],
    "route": [
        {"host": "src", "to": "10.206.8.2/32", "via": "10.206.1.2", "src": "10.206.1.1"},
        {"host": "dst", "to": "10.206.1.0/24", "via": "10.206.3.1", "src": "10.206.8.2"},
    ],
}


def routed_errors(where: str, i: int, change: dict[str, Any]) -> str:
    data = copy.deepcopy(ROUTED)
    data[where][i].update(change)
    with pytest.raises(SpecError) as info:
        parse(data)
    return str(info.value)


def test_routed_spec_parses() -> None:
    spec = parse(ROUTED)
    assert [(h.name, h.forward, [str(a) for a in h.addrs]) for h in spec.hosts] == [
        ("src", False, []),
        ("r", True, []),
        ("dst", False, ["10.206.8.2/32", "fd00:206::8/128"]),
    ]
    assert [r.ip_args() for r in spec.routes] == [
        ["route", "add", "10.206.8.2/32", "via", "10.206.1.2", "dev", "l1", "src", "10.206.1.1"],
        ["route", "add", "10.206.1.0/24", "via", "10.206.3.1", "dev", "b", "src", "10.206.8.2"],
    ]
    data = copy.deepcopy(ROUTED)
    del data["route"][0]["src"]  # optional
    assert parse(data).routes[0].ip_args()[-2:] == ["dev", "l1"]
    assert parse({k: v for k, v in ROUTED.items() if k != "route"}).routes == ()


def test_equalizer_dumbbell_parses() -> None:
    spec = load(CONFIG / "equalizer-60-200ms.toml")
    assert [(h.name, h.forward) for h in spec.hosts] == [
        ("src", False),
        ("r", True),
        ("dst", False),
    ]
    assert [str(a) for a in spec.host("dst").addrs] == ["10.206.8.2/32", "10.206.9.2/32"]
    assert [(lk.name, lk.a, lk.b, lk.delay_ms, lk.rate_mbit) for lk in spec.links] == [
        ("l1", "src", "r", 30, 0),
        ("l2", "src", "r", 100, 0),
        ("b", "r", "dst", 0, 500),
    ]
    assert spec.link("b").queue_bytes == 3_750_000
    routes = {(r.host, str(r.to)): (str(r.via), r.dev) for r in spec.routes}
    assert routes == {
        ("src", "10.206.8.2/32"): ("10.206.1.2", "l1"),
        ("src", "10.206.9.2/32"): ("10.206.2.2", "l2"),
        ("r", "10.206.8.2/32"): ("10.206.3.2", "b"),
        ("r", "10.206.9.2/32"): ("10.206.3.2", "b"),
        ("dst", "10.206.1.0/24"): ("10.206.3.1", "b"),
        ("dst", "10.206.2.0/24"): ("10.206.3.1", "b"),
    }


@pytest.mark.parametrize(
    ("where", "i", "change", "message"),
    [
        ("route", 0, {"via": "10.206.9.9"},
         "route[0].via: 10.206.9.9 is not the far end of any link of host src"),
        ("route", 0, {"via": "10.206.1.1"},  # src's own end of l1
         "route[0].via: 10.206.1.1 is not the far end of any link of host src"),
        ("route", 0, {"via": "10.206.3.2"},  # a link of someone else
         "route[0].via: 10.206.3.2 is not the far end of any link of host src"),
        ("route", 0, {"via": "10.206.1.2/24"}, "route[0].via: "),
        ("route", 0, {"src": "10.206.3.2"},
         "route[0].src: 10.206.3.2 is not an address of host src"),
        ("route", 1, {"src": "10.206.8.9"},
         "route[1].src: 10.206.8.9 is not an address of host dst"),
        ("route", 0, {"metric": 5}, "route[0].metric: unknown field (expected host, src, to, via)"),
        ("route", 0, {"host": "nobody"}, "route[0].host: must name a host, got 'nobody'"),
        ("route", 0, {"to": "10.206.8.2"}, "route[0].to: must be a prefix"),
        ("route", 0, {"to": "10.206.8.2/24"}, "route[0].to: 10.206.8.2/24 has host bits set"),
        ("route", 0, {"to": "10.206.1.0/24"},
         "route[0].to: 10.206.1.0/24 is directly connected to src by l1"),
        ("route", 0, {"to": "fd00:206::8/128"}, "route[0].to: fd00:206::8/128 is IPv6"),
        ("host", 2, {"addrs": ["8.8.8.8/32"]}, "host[2].addrs[0]: must be a private address"),
        ("host", 2, {"addrs": ["127.0.0.2/32"]}, "host[2].addrs[0]: must be a private address"),
        ("host", 2, {"addrs": ["10.206.8.2"]},
         "host[2].addrs[0]: must be an address with a prefix"),
        ("host", 2, {"addrs": "10.206.8.2/32"}, "host[2].addrs: must be a list of addresses"),
        ("host", 2, {"addrs": ["10.206.8.2/32", "10.206.8.2/32"]},
         "host[2].addrs[1]: 10.206.8.2 is already the address of host[2].addrs[0]"),
        ("host", 2, {"addrs": ["10.206.1.2/32"]},
         "link[0] (l1).b_addr: 10.206.1.2 is already the address of host[2].addrs[0]"),
        ("host", 1, {"forward": "yes"}, "host[1].forward: must be true or false, got 'yes'"),
        ("host", 1, {"router": True},
         "host[1].router: unknown field (expected addrs, forward, name)"),
    ],
)  # fmt: skip
def test_route_and_host_errors(where: str, i: int, change: dict[str, Any], message: str) -> None:
    assert message in routed_errors(where, i, change)


def test_duplicate_route_and_all_route_errors_at_once() -> None:
    data = copy.deepcopy(ROUTED)
    data["route"].append(dict(data["route"][0]))
    with pytest.raises(SpecError) as info:
        parse(data)
    assert str(info.value) == (
        "route[2].to: host src already has a route to 10.206.8.2/32 (route[0])"
    )
    data = copy.deepcopy(ROUTED)
    data["route"][0].update(via="10.206.9.9", src="10.206.3.2", weight=1)
    data["route"][1].update(host="zz")
    with pytest.raises(SpecError) as info:
        parse(data)
    assert str(info.value).splitlines() == [
        "route[0].weight: unknown field (expected host, src, to, via)",
        "route[0].via: 10.206.9.9 is not the far end of any link of host src",
        "route[0].src: 10.206.3.2 is not an address of host src",
        "route[1].host: must name a host, got 'zz'",
    ]
