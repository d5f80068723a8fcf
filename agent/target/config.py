"""Target configuration: portals, targets, LUNs, who may log in, CHAP secrets.

Stored as TOML::

    [server]
    portals = ["127.0.0.1:3260"]      # 0.0.0.0:3260 would serve every IPv4 address
    login_timeout = 15.0              # seconds a connection may take to log in
    max_pending_logins = 256          # connections still in login, in total
    max_pending_logins_per_address = 64

    [[target]]
    iqn = "iqn.2026-11.org.reservoir:vol1"
    allow = ["iqn.1994-05.com.example:host1"]     # initiators that may log in
    chap = { user = "host1", secret = "0123456789ab" }
    mutual_chap = { user = "vol1", secret = "ba9876543210" }
    # open = true                     # instead of allow/chap: every initiator, no CHAP

    [[target.lun]]
    id = 0
    path = "/srv/vol1.img"
    read_only = false
    # direct = true                   # every aligned request O_DIRECT (no page cache)
    # bulk_writes = "cached"          # default "direct": see Lun

The file is checked against a declared schema (``config_schema``): an unknown key
or a wrong type is refused, naming the key path. A target admits no one unless it
says who: an ``allow`` list, ``chap``, or ``open = true`` (logged as a warning when
it starts). One volume is exported read-write once at most, whatever the spelling
of its path. :func:`load` reads a file to serve it; :func:`load_for_editing`
accepts a file still being built (no portal, no target, a target admitting no one).

Saving is atomic (temp file with mode 0600 in the same folder, fsync, rename)
because the file holds secrets and must never be seen half written.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomlkit

from reservoir.agent.iscsi.chap import ChapError, check_name, check_secret
from reservoir.agent.storage import DirectIo, volume_identity
from reservoir.agent.target import config_schema as schema
from reservoir.agent.target.errors import TargetError
from reservoir.common.store import write_atomic

DEFAULT_PORT = 3260
DEFAULT_LOGIN_TIMEOUT = 15.0
DEFAULT_MAX_PENDING_LOGINS = 256
DEFAULT_MAX_PENDING_LOGINS_PER_ADDRESS = 64
_IQN = re.compile(r"^(iqn\.\d{4}-\d{2}\.[^\s]+|eui\.[0-9A-Fa-f]{16}|naa\.[0-9A-Fa-f]{16,32})$")


class ConfigError(TargetError):
    """A configuration that cannot be used; the message says which field and why."""


@dataclass(frozen=True)
class Chap:
    user: str
    secret: str

    def to_toml(self) -> dict[str, str]:
        return {"user": self.user, "secret": self.secret}


BulkWrites = Literal["direct", "cached"]


@dataclass
class Lun:
    """A LUN; ``direct`` bypasses the page cache (O_DIRECT) for every aligned request.
    Otherwise reads and small writes go through the page cache, and ``bulk_writes``
    says where aligned writes of 256 KiB and more go: "direct" (the default; a copy's
    data segments, written from the memory they were received into, with no copy into
    the page cache and nothing evicted for them) or "cached" (the page cache too)."""

    id: int
    path: str
    read_only: bool = False
    direct: bool = False
    bulk_writes: BulkWrites = "direct"

    @property
    def direct_io(self) -> DirectIo:
        """The storage engine's policy for the LUN's volume."""
        if self.direct:
            return "all"
        return "bulk-writes" if self.bulk_writes == "direct" else "none"

    def to_toml(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "path": self.path, "read_only": self.read_only}
        if self.direct:
            out["direct"] = True
        if self.bulk_writes != "direct":
            out["bulk_writes"] = self.bulk_writes
        return out


@dataclass
class Target:
    """A target; it admits the initiators of ``allow``, those that pass ``chap``, or,
    with ``open``, every initiator."""

    iqn: str
    alias: str | None = None
    luns: list[Lun] = field(default_factory=list)
    allow: list[str] = field(default_factory=list)
    chap: Chap | None = None
    mutual_chap: Chap | None = None
    open: bool = False

    def lun(self, lun_id: int) -> Lun | None:
        return next((lun for lun in self.luns if lun.id == lun_id), None)

    def to_toml(self) -> dict[str, Any]:
        out: dict[str, Any] = {"iqn": self.iqn}
        if self.alias:
            out["alias"] = self.alias
        if self.open:
            out["open"] = True
        if self.allow:
            out["allow"] = list(self.allow)
        if self.chap:
            out["chap"] = self.chap.to_toml()
        if self.mutual_chap:
            out["mutual_chap"] = self.mutual_chap.to_toml()
        if self.luns:
            out["lun"] = [lun.to_toml() for lun in self.luns]
        return out


@dataclass
class TargetConfig:
    portals: list[tuple[str, int]] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    login_timeout: float = DEFAULT_LOGIN_TIMEOUT
    max_pending_logins: int = DEFAULT_MAX_PENDING_LOGINS
    max_pending_logins_per_address: int = DEFAULT_MAX_PENDING_LOGINS_PER_ADDRESS

    def target(self, iqn: str) -> Target | None:
        return next((t for t in self.targets if t.iqn == iqn), None)

    def require_target(self, iqn: str) -> Target:
        target = self.target(iqn)
        if target is None:
            raise ConfigError(f"no target {iqn!r} in the configuration")
        return target

    def to_toml(self) -> dict[str, Any]:
        server = {
            "portals": [format_portal(host, port) for host, port in self.portals],
            "login_timeout": float(self.login_timeout),
            "max_pending_logins": self.max_pending_logins,
            "max_pending_logins_per_address": self.max_pending_logins_per_address,
        }
        out: dict[str, Any] = {"server": server}
        if self.targets:
            out["target"] = [t.to_toml() for t in self.targets]
        return out


# ---------------------------------------------------------------- portals and CHAP


def parse_portal(text: str) -> tuple[str, int]:
    """``HOST[:PORT]`` or ``[V6]:PORT`` -> (host, port)."""
    host, port = text, DEFAULT_PORT
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ConfigError(f"portal {text!r}: missing ']'")
        host, rest = text[1:end], text[end + 1 :]
        if rest:
            port = _port(text, rest.removeprefix(":"))
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        port = _port(text, port_text)
    if not host:
        raise ConfigError(f"portal {text!r}: empty host")
    return host, port


def _port(text: str, port_text: str) -> int:
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"portal {text!r}: port must be 1..65535")
    return int(port_text)


def format_portal(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def describe_portal(host: str, port: int) -> str:
    """The portal, saying plainly when it is every address of the host."""
    label = format_portal(host, port)
    if host == "0.0.0.0":
        return f"{label} (every IPv4 address of this host)"
    if host == "::":
        return f"{label} (every IPv6 address of this host)"
    return label


def describe_access(target: Target) -> str:
    """Who may log in to ``target``, in one line (never a secret)."""
    if target.open:
        return (
            f"target {target.iqn} is open (open = true): every initiator may log in "
            "and use its LUNs, without ACL or CHAP"
        )
    who = f"initiators {', '.join(target.allow)}" if target.allow else "any initiator name"
    how = ""
    if target.chap:
        mutual = ", mutual" if target.mutual_chap else ""
        how = f" that passes CHAP (user {target.chap.user}{mutual})"
    return f"target {target.iqn} admits {who}{how}"


# ---------------------------------------------------------------- validation


def validate(config: TargetConfig) -> None:
    """Refuse configurations that are wrong whatever they are for, naming the field:
    the schema's types and ranges, names, CHAP secrets, duplicates."""
    try:
        schema.check(config.to_toml())
    except schema.SchemaError as exc:
        raise ConfigError(str(exc)) from None
    seen: set[str] = set()
    for index, target in enumerate(config.targets):
        _validate_target(f"target[{index}]", target, seen)
    _refuse_shared_read_write(config)


def _validate_target(where: str, target: Target, seen: set[str]) -> None:
    if not _IQN.match(target.iqn):
        raise ConfigError(f"{where}: target {target.iqn!r}: not an iqn./eui./naa. name")
    if target.iqn in seen:
        raise ConfigError(f"{where}: target {target.iqn!r}: defined twice")
    seen.add(target.iqn)
    ids = [lun.id for lun in target.luns]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{where}: target {target.iqn!r}: duplicate LUN ids {sorted(ids)}")
    for lun in target.luns:
        if not 0 <= lun.id < 16384:
            raise ConfigError(f"{where}: target {target.iqn!r} lun {lun.id}: id must be 0..16383")
    if target.mutual_chap and not target.chap:
        raise ConfigError(f"{where}: target {target.iqn!r}: mutual_chap needs chap as well")
    if target.open and (target.allow or target.chap):
        raise ConfigError(
            f"{where}.open: target {target.iqn!r} is open to every initiator and yet has "
            "an allow list or CHAP; remove open = true, or the allow list and CHAP"
        )
    for what, chap in (("chap", target.chap), ("mutual_chap", target.mutual_chap)):
        if chap is not None:
            try:
                check_name(chap.user)
                check_secret(chap.secret)
            except ChapError as exc:
                raise ConfigError(f"{where}.{what}: target {target.iqn!r} {what}: {exc}") from exc


def _refuse_shared_read_write(config: TargetConfig) -> None:
    """One volume exported read-write by two LUNs would have two writers that know
    nothing of each other; the volume is known by what its path reaches."""
    writers: dict[object, tuple[str, Lun]] = {}
    for t_index, target in enumerate(config.targets):
        for l_index, lun in enumerate(target.luns):
            if lun.read_only:
                continue
            key = _volume_key(lun.path)
            if key in writers:
                iqn, first = writers[key]
                raise ConfigError(
                    f"target[{t_index}].lun[{l_index}]: target {target.iqn!r} lun {lun.id} "
                    f"({lun.path}) is the volume that target {iqn!r} lun {first.id} "
                    f"({first.path}) exports read-write; a volume may be exported read-write "
                    "once (add read_only = true)"
                )
            writers[key] = (target.iqn, lun)


def _volume_key(path: str) -> object:
    try:
        return volume_identity(path)
    except OSError:
        return ("path", os.path.realpath(path))


def check_servable(config: TargetConfig) -> None:
    """Refuse what may be saved while a file is being built but cannot be served:
    no portal, no target, a target that says nothing of who may log in."""
    if not config.portals:
        raise ConfigError(
            "server.portals: no portal to listen on; add one "
            "(0.0.0.0:3260 would serve every IPv4 address of this host)"
        )
    if not config.targets:
        raise ConfigError("no target to serve: add a [[target]] table (reservoir target add)")
    for index, target in enumerate(config.targets):
        if not (target.open or target.allow or target.chap):
            raise ConfigError(
                f"target[{index}]: target {target.iqn!r} says nothing of who may log in: "
                "add an allow list of initiators, chap, or open = true to admit every "
                "initiator without CHAP"
            )


# ---------------------------------------------------------------- reading and writing


def from_toml(data: dict[str, Any]) -> TargetConfig:
    """A parsed file -> TargetConfig, checked against the schema and :func:`validate`."""
    try:
        tables = schema.check(data)
    except schema.SchemaError as exc:
        raise ConfigError(_problems(exc.problems)) from None
    config = TargetConfig(
        portals=[_portal_at(i, text) for i, text in enumerate(tables.server.portals)],
        targets=[_target_from(t) for t in tables.target],
        login_timeout=tables.server.login_timeout,
        max_pending_logins=tables.server.max_pending_logins,
        max_pending_logins_per_address=tables.server.max_pending_logins_per_address,
    )
    validate(config)
    return config


def _problems(problems: list[str]) -> str:
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems:\n  " + "\n  ".join(problems)


def _portal_at(index: int, text: str) -> tuple[str, int]:
    try:
        return parse_portal(text)
    except ConfigError as exc:
        raise ConfigError(f"server.portals[{index}]: {exc}") from None


def _target_from(raw: schema.TargetTable) -> Target:
    return Target(
        iqn=raw.iqn,
        alias=raw.alias,
        luns=[Lun(x.id, x.path, x.read_only, x.direct, x.bulk_writes) for x in raw.lun],
        allow=list(raw.allow),
        chap=Chap(raw.chap.user, raw.chap.secret) if raw.chap else None,
        mutual_chap=Chap(raw.mutual_chap.user, raw.mutual_chap.secret) if raw.mutual_chap else None,
        open=raw.open,
    )


def read_toml(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such configuration file") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc


def load_for_editing(path: str | Path) -> TargetConfig:
    """The file, checked as a file being built may be (see :func:`check_servable`)."""
    data = read_toml(path)
    try:
        return from_toml(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def load(path: str | Path) -> TargetConfig:
    """The file, checked to be served: nothing is served from a file refused here."""
    config = load_for_editing(path)
    try:
        check_servable(config)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return config


def save(config: TargetConfig, path: str | Path) -> None:
    """Write atomically: temp file (0600) beside ``path``, fsync, rename, fsync folder."""
    validate(config)
    write_atomic(Path(path), tomlkit.dumps(config.to_toml()).encode())
