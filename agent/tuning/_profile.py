"""Tuning profiles: TOML files parsed and validated into :class:`Profile`.

A profile (``config/tuning/NAME.toml``)::

    description = "1 Gbit/s paths of up to 350 ms RTT"

    [sysctl]                                   # key = value, written to /proc/sys
    "net.ipv4.tcp_rmem" = [4096, 131072, 134217728]
    "net.ipv4.tcp_congestion_control" = "bbr"
    "net.core.default_qdisc" = { value = "fq", optional = true }

    [nic]
    interfaces = ["eth1"]                      # default; --interface replaces it
    [nic."*"]                                  # every selected interface
    mtu = 9000
    txqueuelen = 10000
    [nic."*".coalesce]                         # ethtool -C options
    adaptive-rx = true
    [nic.eth1]                                 # one interface, over the "*" defaults
    mtu = 1500

Values: an integer, a string, a boolean (written 1/0) or a list of integers
(written space-separated, e.g. tcp_rmem's min/default/max). An inline table
``{ value = ..., optional = true }`` marks a setting the kernel may lack (no
such key here, or a value it does not know, e.g. a qdisc that is not built):
then it is reported ``skipped`` instead of ``refused``.

The root qdisc of an interface is not a profile setting: kmod-pacing owns it
(``reservoir.pacing.nic`` installs tbf/htb/fq there and restores the kernel's
default), so two owners would undo each other. Profiles set the kernel's
default qdisc for new devices (``net.core.default_qdisc``) instead.

Every problem of a file is collected and reported at once by
:class:`ProfileError`, each naming its field (``sysctl."net.ipv4.tcp_rmem"``,
``nic.eth1.mtu``, ...).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from reservoir.agent.tuning._errors import TuningError
from reservoir.shipped import config_dir

PROFILE_DIR = config_dir() / "tuning"

MTU_MIN = 68
MTU_MAX = 65535
TXQUEUELEN_MAX = (1 << 32) - 1
COALESCE_MAX = (1 << 32) - 1

# ethtool -C options a profile may set: on/off ones and numeric ones.
COALESCE_BOOL = frozenset({"adaptive-rx", "adaptive-tx"})
COALESCE_INT = frozenset(
    {
        "sample-interval",
        "stats-block-usecs",
        "pkt-rate-low",
        "pkt-rate-high",
        "rx-usecs",
        "rx-frames",
        "rx-usecs-irq",
        "rx-frames-irq",
        "tx-usecs",
        "tx-frames",
        "tx-usecs-irq",
        "tx-frames-irq",
        "rx-usecs-low",
        "rx-frames-low",
        "tx-usecs-low",
        "tx-frames-low",
        "rx-usecs-high",
        "rx-frames-high",
        "tx-usecs-high",
        "tx-frames-high",
    }
)
COALESCE_KEYS = COALESCE_BOOL | COALESCE_INT

TOP_KEYS = ("description", "sysctl", "nic")
NIC_KEYS = ("mtu", "txqueuelen", "coalesce")
_SYSCTL_KEY = re.compile(r"net(\.[A-Za-z0-9_-]+)+")
_IFNAME = re.compile(r"[^\s/:]{1,15}")


class ProfileError(TuningError):
    """A profile that cannot be used: every problem found, each naming its field."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = list(problems)
        if len(self.problems) == 1:
            text = f"{source}: {self.problems[0]}"
        else:
            lines = "".join(f"\n  {p}" for p in self.problems)
            text = f"{source}: {len(self.problems)} problems:{lines}"
        super().__init__(text)


@dataclass(frozen=True)
class SysctlSetting:
    """One ``/proc/sys`` value: ``key`` in dotted form, ``value`` as written."""

    key: str
    value: str
    optional: bool = False

    @property
    def path(self) -> str:
        """The file under /proc/sys, e.g. ``net/ipv4/tcp_rmem``."""
        return self.key.replace(".", "/")


@dataclass(frozen=True)
class NicSettings:
    """What a profile sets on one interface (None / empty: left alone)."""

    mtu: int | None = None
    txqueuelen: int | None = None
    coalesce: Mapping[str, str] = field(default_factory=dict)

    def over(self, defaults: NicSettings) -> NicSettings:
        """These settings on top of ``defaults`` (the ``"*"`` table)."""
        return NicSettings(
            mtu=self.mtu if self.mtu is not None else defaults.mtu,
            txqueuelen=self.txqueuelen if self.txqueuelen is not None else defaults.txqueuelen,
            coalesce={**defaults.coalesce, **self.coalesce},
        )

    def empty(self) -> bool:
        return self.mtu is None and self.txqueuelen is None and not self.coalesce


@dataclass(frozen=True)
class Profile:
    name: str
    source: str
    description: str = ""
    sysctl: tuple[SysctlSetting, ...] = ()
    interfaces: tuple[str, ...] = ()
    nic_default: NicSettings = field(default_factory=NicSettings)
    nic: Mapping[str, NicSettings] = field(default_factory=dict)

    def nic_targets(self, interfaces: Sequence[str] | None = None) -> list[tuple[str, NicSettings]]:
        """The interfaces to tune, each with its settings (``"*"`` merged in).

        ``interfaces`` (the command line) replaces the profile's own list; with
        neither, the interfaces that have a table of their own.
        """
        if interfaces:
            chosen = list(dict.fromkeys(interfaces))
        elif self.interfaces:
            chosen = list(self.interfaces)
        else:
            chosen = list(self.nic)
        targets = []
        for ifname in chosen:
            settings = self.nic.get(ifname, NicSettings()).over(self.nic_default)
            if not settings.empty():
                targets.append((ifname, settings))
        return targets


# ------------------------------------------------------------------ parsing


def resolve_profile(name_or_path: str, profile_dir: Path = PROFILE_DIR) -> Path:
    """``NAME`` -> ``config/tuning/NAME.toml``; anything path-like, or an existing
    file, is taken as a path. ProfileError if there is no such profile."""
    path = Path(name_or_path)
    looks_like_path = "/" in name_or_path or name_or_path.endswith(".toml")
    if looks_like_path or path.is_file():
        if not path.is_file():
            raise ProfileError(name_or_path, ["no such file"])
        return path
    candidate = profile_dir / f"{name_or_path}.toml"
    if not candidate.is_file():
        known = ", ".join(sorted(p.stem for p in profile_dir.glob("*.toml"))) or "none"
        raise ProfileError(name_or_path, [f"no profile of that name in {profile_dir} ({known})"])
    return candidate


def load_profile(name_or_path: str, profile_dir: Path = PROFILE_DIR) -> Profile:
    path = resolve_profile(name_or_path, profile_dir)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(str(path), [f"not valid TOML: {e}"]) from e
    except OSError as e:
        raise ProfileError(str(path), [f"cannot read: {e.strerror}"]) from e
    return parse_profile(data, name=path.stem, source=str(path))


def parse_profile(data: Mapping[str, Any], name: str, source: str = "<profile>") -> Profile:
    """A validated profile from parsed TOML; ProfileError lists every problem."""
    problems: list[str] = []
    for key in data:
        if key not in TOP_KEYS:
            problems.append(
                f"{key}: unknown section or key (expected one of {', '.join(TOP_KEYS)})"
            )
    description = data.get("description", "")
    if not isinstance(description, str):
        problems.append(f"description: must be a string, not {_type(description)}")
        description = ""
    sysctl = _parse_sysctl(data.get("sysctl", {}), problems)
    interfaces, default, per_if = _parse_nic(data.get("nic", {}), problems)
    if problems:
        raise ProfileError(source, problems)
    return Profile(
        name=name,
        source=source,
        description=description,
        sysctl=sysctl,
        interfaces=interfaces,
        nic_default=default,
        nic=per_if,
    )


def _type(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string"}
    names |= {list: "an array", dict: "a table"}
    return names.get(type(value), type(value).__name__)


def _sysctl_value(value: object) -> str | None:
    """The text written to /proc/sys for a TOML value; None if the type is wrong."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value.strip() and "\n" not in value:
        return " ".join(value.split())
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return " ".join(str(v) for v in value)
    return None


def _parse_sysctl(table: object, problems: list[str]) -> tuple[SysctlSetting, ...]:
    if not isinstance(table, dict):
        problems.append(f"sysctl: must be a table of key = value, not {_type(table)}")
        return ()
    settings = []
    for key, raw in table.items():
        where = f'sysctl."{key}"'
        if not _SYSCTL_KEY.fullmatch(key):
            problems.append(
                f"{where}: not a network sysctl key (expected net.<...>, dotted, "
                "e.g. net.ipv4.tcp_rmem)"
            )
            continue
        optional = False
        value = raw
        if isinstance(raw, dict):
            extra = sorted(set(raw) - {"value", "optional"})
            if extra:
                problems.append(f"{where}.{extra[0]}: unknown key (expected value, optional)")
                continue
            if "value" not in raw:
                problems.append(f"{where}.value: missing")
                continue
            opt = raw.get("optional", False)
            if not isinstance(opt, bool):
                problems.append(f"{where}.optional: must be true or false, not {_type(opt)}")
                continue
            optional, value = opt, raw["value"]
        text = _sysctl_value(value)
        if text is None:
            problems.append(
                f"{where}: must be an integer, a string, a boolean or an array of "
                f"integers, not {_type(value)}"
            )
            continue
        settings.append(SysctlSetting(key, text, optional))
    return tuple(settings)


def _parse_nic(
    table: object, problems: list[str]
) -> tuple[tuple[str, ...], NicSettings, dict[str, NicSettings]]:
    if not isinstance(table, dict):
        problems.append(f"nic: must be a table, not {_type(table)}")
        return (), NicSettings(), {}
    interfaces: tuple[str, ...] = ()
    raw_ifs = table.get("interfaces", [])
    if not isinstance(raw_ifs, list) or not all(isinstance(i, str) for i in raw_ifs):
        problems.append(
            f"nic.interfaces: must be an array of interface names, not {_type(raw_ifs)}"
        )
    else:
        bad = [i for i in raw_ifs if not _IFNAME.fullmatch(i) or i in (".", "..")]
        if bad:
            problems.append(f"nic.interfaces: not an interface name: {bad[0]!r}")
        interfaces = tuple(raw_ifs)
    default = NicSettings()
    per_if: dict[str, NicSettings] = {}
    for name, sub in table.items():
        if name == "interfaces":
            continue
        if name != "*" and (not _IFNAME.fullmatch(name) or name in (".", "..")):
            problems.append(f"nic.{name}: not an interface name (at most 15 characters, no /)")
            continue
        label = 'nic."*"' if name == "*" else f"nic.{name}"
        if not isinstance(sub, dict):
            problems.append(f"{label}: must be a table of interface settings, not {_type(sub)}")
            continue
        settings = _parse_nic_settings(sub, label, problems)
        if name == "*":
            default = settings
        else:
            per_if[name] = settings
    return interfaces, default, per_if


def _parse_nic_settings(table: dict[str, Any], label: str, problems: list[str]) -> NicSettings:
    settings = NicSettings()
    for key, value in table.items():
        where = f"{label}.{key}"
        if key == "qdisc":
            problems.append(
                f"{where}: the root qdisc is kmod-pacing's (reservoir.pacing.nic); "
                'set sysctl "net.core.default_qdisc" instead'
            )
        elif key == "mtu":
            if _int_in(value, MTU_MIN, MTU_MAX, where, problems):
                settings = replace(settings, mtu=value)
        elif key == "txqueuelen":
            if _int_in(value, 0, TXQUEUELEN_MAX, where, problems):
                settings = replace(settings, txqueuelen=value)
        elif key == "coalesce":
            settings = replace(settings, coalesce=_parse_coalesce(value, where, problems))
        else:
            problems.append(f"{where}: unknown key (expected one of {', '.join(NIC_KEYS)})")
    return settings


def _int_in(value: object, lo: int, hi: int, where: str, problems: list[str]) -> bool:
    if not isinstance(value, int) or isinstance(value, bool):
        problems.append(f"{where}: must be an integer, not {_type(value)}")
        return False
    if not lo <= value <= hi:
        problems.append(f"{where}: {value} is out of range ({lo}..{hi})")
        return False
    return True


def _parse_coalesce(table: object, where: str, problems: list[str]) -> dict[str, str]:
    if not isinstance(table, dict):
        problems.append(f"{where}: must be a table of ethtool -C options, not {_type(table)}")
        return {}
    options: dict[str, str] = {}
    for key, value in table.items():
        at = f"{where}.{key}"
        if key in COALESCE_BOOL:
            if isinstance(value, bool):
                options[key] = "on" if value else "off"
            else:
                problems.append(f"{at}: must be true or false, not {_type(value)}")
        elif key in COALESCE_INT:
            if _int_in(value, 0, COALESCE_MAX, at, problems):
                options[key] = str(value)
        else:
            problems.append(f"{at}: not an ethtool coalescing option we set (e.g. rx-usecs)")
    return options
