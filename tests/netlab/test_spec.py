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
