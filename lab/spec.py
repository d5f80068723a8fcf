"""Lab specs: hosts (network namespaces) and links between them, read from TOML.

A spec is validated as a whole; every problem is reported with its field,
e.g. ``link[0] (l1).rate_mbit: must be >= 0, got -5``.
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,11}$")
IFNAME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]{0,14}$")
HOST_KEYS = {"name"}
LINK_DEFAULTS: dict[str, Any] = {
    "rate_mbit": 0.0,
    "delay_ms": 0.0,
    "loss": 0.0,
    "queue_bytes": 0,
    "mtu": 1500,
    "jitter_us": 0.0,
}
LINK_KEYS = {"name", "a", "b", "a_addr", "b_addr", *LINK_DEFAULTS}


class SpecError(ValueError):
    """A spec that cannot be built; the message lists every problem, one a line."""


@dataclass(frozen=True)
class Host:
    name: str


@dataclass(frozen=True)
class Link:
    name: str
    a: str
    b: str
    a_addr: ipaddress.IPv4Interface | ipaddress.IPv6Interface
    b_addr: ipaddress.IPv4Interface | ipaddress.IPv6Interface
    rate_mbit: float = 0.0
    delay_ms: float = 0.0
    loss: float = 0.0
    queue_bytes: int = 0
    mtu: int = 1500
    jitter_us: float = 0.0

    @property
    def delayed(self) -> bool:
        return self.delay_ms > 0


@dataclass(frozen=True)
class Spec:
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]

    def link(self, name: str) -> Link:
        for link in self.links:
            if link.name == name:
                return link
        raise SpecError(
            f"no link named {name!r} (links: {', '.join(lk.name for lk in self.links)})"
        )


def load(path: Path) -> Spec:
    """Read and validate a spec file."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise SpecError(f"{path}: cannot read: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}") from e
    try:
        return parse(data)
    except SpecError as e:
        raise SpecError(f"{path}:\n{e}") from e


def parse(data: dict[str, Any]) -> Spec:
    """Validate a spec already read from TOML."""
    errors: list[str] = []
    unknown = sorted(set(data) - {"host", "link"})
    if unknown:
        errors.append(f"unknown top-level keys: {', '.join(unknown)} (expected host, link)")
    hosts = _hosts(_tables(data, "host", errors), errors)
    names = {h.name for h in hosts}
    links = [_link(i, t, names, errors) for i, t in enumerate(_tables(data, "link", errors))]
    _check_unique([lk.name for lk in links if lk is not None], "link", errors)
    if errors:
        raise SpecError("\n".join(errors))
    return Spec(tuple(hosts), tuple(lk for lk in links if lk is not None))


def _tables(data: dict[str, Any], key: str, errors: list[str]) -> list[dict[str, Any]]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        errors.append(f"{key}: must be an array of tables ([[{key}]])")
        return []
    if not value:
        errors.append(f"{key}: at least one [[{key}]] is needed")
    return value


def _check_unique(names: list[str], what: str, errors: list[str]) -> None:
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        errors.append(f"{what}: duplicate names: {', '.join(dups)}")


def _hosts(tables: list[dict[str, Any]], errors: list[str]) -> list[Host]:
    hosts = []
    for i, t in enumerate(tables):
        where = f"host[{i}]"
        for k in sorted(set(t) - HOST_KEYS):
            errors.append(f"{where}.{k}: unknown field (expected name)")
        name = t.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            errors.append(f"{where}.name: must match {NAME_RE.pattern}, got {name!r}")
            continue
        hosts.append(Host(name))
    _check_unique([h.name for h in hosts], "host", errors)
    return hosts


def _link(i: int, t: dict[str, Any], hosts: set[str], errors: list[str]) -> Link | None:
    name = t.get("name")
    where = f"link[{i}] ({name})" if isinstance(name, str) else f"link[{i}]"
    n_before = len(errors)
    for k in sorted(set(t) - LINK_KEYS):
        errors.append(f"{where}.{k}: unknown field (expected {', '.join(sorted(LINK_KEYS))})")
    if not isinstance(name, str) or not IFNAME_RE.match(name) or name == "lo":
        errors.append(f"{where}.name: must be an interface name matching {IFNAME_RE.pattern}")
    for end in ("a", "b"):
        if t.get(end) not in hosts:
            errors.append(f"{where}.{end}: must name a host, got {t.get(end)!r}")
    if "a" in t and t.get("a") == t.get("b"):
        errors.append(f"{where}: a and b must be different hosts")
    addrs = [_addr(where, f"{end}_addr", t.get(f"{end}_addr"), errors) for end in ("a", "b")]
    a_addr, b_addr = addrs
    if a_addr is not None and b_addr is not None:
        _check_pair(where, a_addr, b_addr, errors)
    values = {k: _number(where, k, t.get(k, d), errors) for k, d in LINK_DEFAULTS.items()}
    if len(errors) > n_before or a_addr is None or b_addr is None:
        return None
    return Link(
        name=str(name), a=str(t["a"]), b=str(t["b"]), a_addr=a_addr, b_addr=b_addr,
        rate_mbit=float(values["rate_mbit"]), delay_ms=float(values["delay_ms"]),
        loss=float(values["loss"]), queue_bytes=int(values["queue_bytes"]),
        mtu=int(values["mtu"]), jitter_us=float(values["jitter_us"]),
    )  # fmt: skip


def _addr(
    where: str, key: str, value: Any, errors: list[str]
) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface | None:
    if not isinstance(value, str) or "/" not in value:
        errors.append(f"{where}.{key}: must be an address with a prefix, e.g. 10.201.1.1/24")
        return None
    try:
        iface = ipaddress.ip_interface(value)
    except ValueError as e:
        errors.append(f"{where}.{key}: {e}")
        return None
    if not iface.ip.is_private or iface.ip.is_loopback:
        errors.append(f"{where}.{key}: must be a private address, got {value}")
        return None
    return iface


def _check_pair(
    where: str,
    a: ipaddress.IPv4Interface | ipaddress.IPv6Interface,
    b: ipaddress.IPv4Interface | ipaddress.IPv6Interface,
    errors: list[str],
) -> None:
    if a.network != b.network:
        errors.append(f"{where}: a_addr {a} and b_addr {b} are not in the same subnet")
    elif a.ip == b.ip:
        errors.append(f"{where}: a_addr and b_addr are the same address {a.ip}")


LIMITS: dict[str, tuple[float, float, type]] = {
    "rate_mbit": (0, 100_000, float),
    "delay_ms": (0, 10_000, float),
    "loss": (0, 0.99, float),
    "queue_bytes": (0, 1 << 34, int),
    "mtu": (576, 65_535, int),
    "jitter_us": (0, 1_000_000, float),
}


def _number(where: str, key: str, value: Any, errors: list[str]) -> float:
    lo, hi, kind = LIMITS[key]
    ok_types = (int,) if kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_types):
        errors.append(f"{where}.{key}: must be {'an integer' if kind is int else 'a number'}")
        return 0
    if not lo <= value <= hi:
        errors.append(f"{where}.{key}: must be in [{lo:g}, {hi:g}], got {value}")
        return 0
    return float(value)
