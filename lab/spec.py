"""Lab specs: hosts (network namespaces), links between them and routes, read from TOML.

A spec is validated as a whole; every problem is reported with its field,
e.g. ``link[0] (l1).rate_mbit: must be >= 0, got -5``.

A host may forward (``forward = true``: a router) and carry extra addresses on
its loopback (``addrs``); ``[[route]]`` tables add routes inside a host, through
the far end of one of its links::

    [[route]]
    host = "src"
    to = "10.206.8.2/32"
    via = "10.206.1.2"      # the other end of one of src's links: the device is that link
    src = "10.206.1.1"      # optional: one of src's own addresses
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reservoir.lab.errors import LabError

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,11}$")
IFNAME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]{0,14}$")
HOST_KEYS = {"name", "forward", "addrs"}
ROUTE_KEYS = {"host", "to", "via", "src"}
LINK_DEFAULTS: dict[str, Any] = {
    "rate_mbit": 0.0,
    "delay_ms": 0.0,
    "loss": 0.0,
    "queue_bytes": 0,
    "mtu": 1500,
    "jitter_us": 0.0,
}
LINES = ("dline", "netem")
"""What delays a link: the userspace delay line, or the kernel's sch_netem where it has it."""
LINK_KEYS = {"name", "a", "b", "a_addr", "b_addr", "line", *LINK_DEFAULTS}


class SpecError(LabError):
    """A spec that cannot be built; the message lists every problem, one a line."""


Interface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Host:
    name: str
    forward: bool = False
    """A router: IP forwarding on, reverse-path filtering off."""
    addrs: tuple[Interface, ...] = ()
    """Extra addresses on the host's loopback ``lo``."""


@dataclass(frozen=True)
class Link:
    name: str
    a: str
    b: str
    a_addr: Interface
    b_addr: Interface
    rate_mbit: float = 0.0
    delay_ms: float = 0.0
    loss: float = 0.0
    queue_bytes: int = 0
    mtu: int = 1500
    jitter_us: float = 0.0
    line: str = "dline"  # one of LINES

    @property
    def delayed(self) -> bool:
        return self.delay_ms > 0

    def far_end(self, host: str) -> Interface:
        """The address of the other end of this link, seen from ``host``."""
        return self.b_addr if host == self.a else self.a_addr

    def near_end(self, host: str) -> Interface:
        """The address of ``host``'s own end of this link."""
        return self.a_addr if host == self.a else self.b_addr


@dataclass(frozen=True)
class Route:
    """``ip route add TO via VIA dev DEV [src SRC]`` inside ``host``; ``dev`` is the link
    whose far end is ``via``."""

    host: str
    to: Network
    via: Address
    dev: str
    src: Address | None = None

    def ip_args(self) -> list[str]:
        args = ["route", "add", str(self.to), "via", str(self.via), "dev", self.dev]
        return [*args, "src", str(self.src)] if self.src is not None else args


@dataclass(frozen=True)
class Spec:
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    routes: tuple[Route, ...] = ()

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise SpecError(f"no host named {name!r}")

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
    unknown = sorted(set(data) - {"host", "link", "route"})
    if unknown:
        errors.append(f"unknown top-level keys: {', '.join(unknown)} (expected host, link, route)")
    owned: list[tuple[str, Interface]] = []  # every address in the spec, and its field
    hosts = _hosts(_tables(data, "host", errors), errors, owned)
    names = {h.name for h in hosts}
    tables = _tables(data, "link", errors)
    maybe_links = [_link(i, t, names, errors, owned) for i, t in enumerate(tables)]
    links = [lk for lk in maybe_links if lk is not None]
    _check_unique([lk.name for lk in links], "link", errors)
    _check_addrs_unique(owned, errors)
    route_tables = _tables(data, "route", errors, required=False)
    routes = [_route(i, t, hosts, links, errors) for i, t in enumerate(route_tables)]
    _check_routes_unique(routes, errors)
    if errors:
        raise SpecError("\n".join(errors))
    return Spec(tuple(hosts), tuple(links), tuple(r for r in routes if r is not None))


def _tables(
    data: dict[str, Any], key: str, errors: list[str], required: bool = True
) -> list[dict[str, Any]]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        errors.append(f"{key}: must be an array of tables ([[{key}]])")
        return []
    if not value and required:
        errors.append(f"{key}: at least one [[{key}]] is needed")
    return value


def _check_unique(names: list[str], what: str, errors: list[str]) -> None:
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        errors.append(f"{what}: duplicate names: {', '.join(dups)}")


def _hosts(
    tables: list[dict[str, Any]], errors: list[str], owned: list[tuple[str, Interface]]
) -> list[Host]:
    hosts = []
    for i, t in enumerate(tables):
        where = f"host[{i}]"
        for k in sorted(set(t) - HOST_KEYS):
            errors.append(f"{where}.{k}: unknown field (expected {', '.join(sorted(HOST_KEYS))})")
        forward = t.get("forward", False)
        if not isinstance(forward, bool):
            errors.append(f"{where}.forward: must be true or false, got {forward!r}")
        addrs = _host_addrs(where, t.get("addrs", []), errors)
        owned += [(f"{where}.addrs[{j}]", a) for j, a in enumerate(addrs)]
        name = t.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            errors.append(f"{where}.name: must match {NAME_RE.pattern}, got {name!r}")
            continue
        hosts.append(Host(name, forward=forward is True, addrs=addrs))
    _check_unique([h.name for h in hosts], "host", errors)
    return hosts


def _host_addrs(where: str, value: Any, errors: list[str]) -> tuple[Interface, ...]:
    if not isinstance(value, list):
        errors.append(f'{where}.addrs: must be a list of addresses, e.g. ["10.206.8.2/32"]')
        return ()
    addrs = (_addr(where, f"addrs[{j}]", v, errors) for j, v in enumerate(value))
    return tuple(a for a in addrs if a is not None)


def _check_addrs_unique(owned: list[tuple[str, Interface]], errors: list[str]) -> None:
    """No address twice in the spec: links' ends and hosts' extra addresses."""
    seen: dict[Address, str] = {}
    for where, iface in owned:
        if iface.ip in seen:
            errors.append(f"{where}: {iface.ip} is already the address of {seen[iface.ip]}")
        else:
            seen[iface.ip] = where


def _link(
    i: int,
    t: dict[str, Any],
    hosts: set[str],
    errors: list[str],
    owned: list[tuple[str, Interface]],
) -> Link | None:
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
    ends = [(f"{where}.{end}_addr", a) for end, a in zip("ab", addrs, strict=True) if a]
    owned += ends[:1] if a_addr and b_addr and a_addr.ip == b_addr.ip else ends  # see _check_pair
    if a_addr is not None and b_addr is not None:
        _check_pair(where, a_addr, b_addr, errors)
    values = {k: _number(where, k, t.get(k, d), errors) for k, d in LINK_DEFAULTS.items()}
    line = t.get("line", "dline")
    if line not in LINES:
        errors.append(f"{where}.line: must be one of {', '.join(LINES)}, got {line!r}")
    if len(errors) > n_before or a_addr is None or b_addr is None:
        return None
    return Link(
        name=str(name), a=str(t["a"]), b=str(t["b"]), a_addr=a_addr, b_addr=b_addr,
        rate_mbit=float(values["rate_mbit"]), delay_ms=float(values["delay_ms"]),
        loss=float(values["loss"]), queue_bytes=int(values["queue_bytes"]),
        mtu=int(values["mtu"]), jitter_us=float(values["jitter_us"]), line=str(line),
    )  # fmt: skip


def _route(
    i: int, t: dict[str, Any], hosts: list[Host], links: list[Link], errors: list[str]
) -> Route | None:
    where = f"route[{i}]"
    n_before = len(errors)
    for k in sorted(set(t) - ROUTE_KEYS):
        errors.append(f"{where}.{k}: unknown field (expected {', '.join(sorted(ROUTE_KEYS))})")
    name = t.get("host")
    host = next((h for h in hosts if h.name == name), None)
    if host is None:
        errors.append(f"{where}.host: must name a host, got {name!r}")
    to = _prefix(where, t.get("to"), errors)
    via = _ip(where, "via", t.get("via"), errors)
    src = _ip(where, "src", t["src"], errors) if "src" in t else None
    if host is None or to is None or via is None:
        return None
    mine = [lk for lk in links if host.name in (lk.a, lk.b)]
    dev = next((lk for lk in mine if lk.far_end(host.name).ip == via), None)
    if dev is None:
        errors.append(f"{where}.via: {via} is not the far end of any link of host {host.name}")
    elif dev.near_end(host.name).network.version != to.version:
        errors.append(f"{where}.to: {to} is IPv{to.version}, via {via} is IPv{via.version}")
    else:
        for lk in mine:
            if lk.near_end(host.name).network == to:
                errors.append(f"{where}.to: {to} is directly connected to {host.name} by {lk.name}")
    own = {lk.near_end(host.name).ip for lk in mine} | {a.ip for a in host.addrs}
    if src is not None and src not in own:
        errors.append(f"{where}.src: {src} is not an address of host {host.name}")
    if len(errors) > n_before or dev is None:
        return None
    return Route(host.name, to, via, dev.name, src)


def _check_routes_unique(routes: list[Route | None], errors: list[str]) -> None:
    seen: dict[tuple[str, Network], int] = {}
    for i, r in enumerate(routes):
        if r is None:
            continue
        if (r.host, r.to) in seen:
            first = seen[(r.host, r.to)]
            errors.append(
                f"route[{i}].to: host {r.host} already has a route to {r.to} (route[{first}])"
            )
        seen.setdefault((r.host, r.to), i)


def _prefix(where: str, value: Any, errors: list[str]) -> Network | None:
    if not isinstance(value, str) or "/" not in value:
        errors.append(f"{where}.to: must be a prefix, e.g. 10.206.3.0/24 or 10.206.8.2/32")
        return None
    try:
        return ipaddress.ip_network(value)
    except ValueError as e:
        errors.append(f"{where}.to: {e}")
        return None


def _ip(where: str, key: str, value: Any, errors: list[str]) -> Address | None:
    if not isinstance(value, str):
        errors.append(f"{where}.{key}: must be an address without a prefix, e.g. 10.206.1.2")
        return None
    try:
        return ipaddress.ip_address(value)
    except ValueError as e:
        errors.append(f"{where}.{key}: {e}")
        return None


def _addr(where: str, key: str, value: Any, errors: list[str]) -> Interface | None:
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


def _check_pair(where: str, a: Interface, b: Interface, errors: list[str]) -> None:
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
