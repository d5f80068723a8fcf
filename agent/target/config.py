"""Target configuration: portals, targets, LUNs, ACLs and CHAP secrets.

Stored as TOML::

    [server]
    portals = ["127.0.0.1:3260"]

    [[target]]
    iqn = "iqn.2026-11.org.reservoir:vol1"
    allow = ["iqn.1994-05.com.example:host1"]     # empty or absent: everyone
    chap = { user = "host1", secret = "0123456789ab" }
    mutual_chap = { user = "vol1", secret = "ba9876543210" }

    [[target.lun]]
    id = 0
    path = "/srv/vol1.img"
    read_only = false

Saving is atomic (temp file with mode 0600 in the same folder, fsync, rename)
because the file holds secrets and must never be seen half written.
"""

from __future__ import annotations

import os
import re
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from reservoir.agent.iscsi.chap import ChapError, check_name, check_secret

DEFAULT_PORT = 3260
_IQN = re.compile(r"^(iqn\.\d{4}-\d{2}\.[^\s]+|eui\.[0-9A-Fa-f]{16}|naa\.[0-9A-Fa-f]{16,32})$")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message says which field and why."""


@dataclass(frozen=True)
class Chap:
    user: str
    secret: str

    def to_toml(self) -> dict[str, str]:
        return {"user": self.user, "secret": self.secret}


@dataclass
class Lun:
    """A LUN; ``direct`` bypasses the page cache (O_DIRECT) for aligned requests."""

    id: int
    path: str
    read_only: bool = False
    direct: bool = False

    def to_toml(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "path": self.path, "read_only": self.read_only}
        if self.direct:
            out["direct"] = True
        return out


@dataclass
class Target:
    iqn: str
    alias: str | None = None
    luns: list[Lun] = field(default_factory=list)
    allow: list[str] = field(default_factory=list)
    chap: Chap | None = None
    mutual_chap: Chap | None = None

    def lun(self, lun_id: int) -> Lun | None:
        return next((lun for lun in self.luns if lun.id == lun_id), None)

    def to_toml(self) -> dict[str, Any]:
        out: dict[str, Any] = {"iqn": self.iqn}
        if self.alias:
            out["alias"] = self.alias
        if self.allow:
            out["allow"] = list(self.allow)
        if self.chap:
            out["chap"] = self.chap.to_toml()
        if self.mutual_chap:
            out["mutual_chap"] = self.mutual_chap.to_toml()
        out["lun"] = [lun.to_toml() for lun in self.luns]
        return out


@dataclass
class TargetConfig:
    portals: list[tuple[str, int]] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)

    def target(self, iqn: str) -> Target | None:
        return next((t for t in self.targets if t.iqn == iqn), None)

    def require_target(self, iqn: str) -> Target:
        target = self.target(iqn)
        if target is None:
            raise ConfigError(f"no target {iqn!r} in the configuration")
        return target

    def to_toml(self) -> dict[str, Any]:
        portals = [format_portal(host, port) for host, port in self.portals]
        return {"server": {"portals": portals}, "target": [t.to_toml() for t in self.targets]}


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


def parse_chap(text: str, what: str = "chap") -> Chap:
    """``USER:SECRET`` -> Chap."""
    user, sep, secret = text.partition(":")
    if not sep or not user or not secret:
        raise ConfigError(f"{what}: expected USER:SECRET")
    return Chap(user, secret)


def validate(config: TargetConfig) -> None:
    """Refuse configurations the target cannot serve, naming the field."""
    if not config.portals:
        raise ConfigError("server.portals: at least one portal is needed")
    seen: set[str] = set()
    for target in config.targets:
        _validate_target(target, seen)


def _validate_target(target: Target, seen: set[str]) -> None:
    if not _IQN.match(target.iqn):
        raise ConfigError(f"target {target.iqn!r}: not an iqn./eui./naa. name")
    if target.iqn in seen:
        raise ConfigError(f"target {target.iqn!r}: defined twice")
    seen.add(target.iqn)
    ids = [lun.id for lun in target.luns]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"target {target.iqn!r}: duplicate LUN ids {sorted(ids)}")
    for lun in target.luns:
        if not 0 <= lun.id < 16384:
            raise ConfigError(f"target {target.iqn!r} lun {lun.id}: id must be 0..16383")
    if target.mutual_chap and not target.chap:
        raise ConfigError(f"target {target.iqn!r}: mutual_chap needs chap as well")
    for what, chap in (("chap", target.chap), ("mutual_chap", target.mutual_chap)):
        if chap is not None:
            try:
                check_name(chap.user)
                check_secret(chap.secret)
            except ChapError as exc:
                raise ConfigError(f"target {target.iqn!r} {what}: {exc}") from exc


def from_toml(data: dict[str, Any]) -> TargetConfig:
    try:
        server = data.get("server", {})
        portals = [parse_portal(str(p)) for p in server.get("portals", [])]
        targets = [_target_from(t) for t in data.get("target", [])]
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"malformed configuration: {exc!r}") from exc
    config = TargetConfig(portals=portals, targets=targets)
    validate(config)
    return config


def _target_from(raw: dict[str, Any]) -> Target:
    chap = raw.get("chap")
    mutual = raw.get("mutual_chap")
    return Target(
        iqn=str(raw["iqn"]),
        alias=raw.get("alias"),
        luns=[_lun_from(x) for x in raw.get("lun", [])],
        allow=[str(a) for a in raw.get("allow", [])],
        chap=Chap(str(chap["user"]), str(chap["secret"])) if chap else None,
        mutual_chap=Chap(str(mutual["user"]), str(mutual["secret"])) if mutual else None,
    )


def _lun_from(raw: dict[str, Any]) -> Lun:
    return Lun(
        int(raw["id"]),
        str(raw["path"]),
        bool(raw.get("read_only", False)),
        bool(raw.get("direct", False)),
    )


def load(path: str | Path) -> TargetConfig:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such configuration file") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    return from_toml(data)


def save(config: TargetConfig, path: str | Path) -> None:
    """Write atomically: temp file (0600) beside ``path``, fsync, rename, fsync folder."""
    validate(config)
    path = Path(path)
    payload = tomli_w.dumps(config.to_toml()).encode()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, payload)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
