"""The topology a campaign runs on, ``[topology]``: one of

loopback, the data path alone (no lab, no links)::

    [topology]
    loopback = true
    bottleneck_mbit = 8000     # optional: the rate time estimates assume (default 10000)

a lab spec file (lab/spec.py), relative to the repository::

    [topology]
    lab = "config/lab/lfn-2x500m-100ms.toml"
    source = "src"             # the host that sends ...
    destination = "dst"        # ... and the one that receives
    paths = ["l1", "l2"]       # the links the streams use: each one touches the source
    bottleneck_mbit = 1000     # the aggregate bottleneck the goodput is measured against

the same with the spec inline, as ``[[topology.lab.host]]``, ``[[topology.lab.link]]``
and ``[[topology.lab.route]]`` tables (the keys of a spec file);

or registered agents, links and volume sets of a coordinator (``reservoir campaign run
--coordinator URL --token-file F``), the links (names or ids) being the paths::

    [topology]
    real = { links = ["l1", "l2"], source_set = "vs-a", destination_set = "vs-b" }
    source = "site-a-1"        # agent names: each link joins these two
    destination = "site-b-1"
    bottleneck_mbit = 1000

iperf3 runs through the agents' control API (by way of the coordinator); reservoir runs
copy the whole ``source_set`` onto ``destination_set`` (names or ids; needed only with
reservoir runs), whose contents every reservoir run overwrites.

A delay line carries at most ~8 Gbit/s on one core (design section 4): a lab link with
a delay and a rate above 8000 Mbit/s is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from reservoir.campaigns import _check as check
from reservoir.lab import spec as labspec

Kind = Literal["loopback", "lab", "real"]
MAX_LINE_MBIT = 8000  # per delay line (design section 4)
MAX_MBIT = 100_000
LOOPBACK_MBIT = 10_000.0  # what estimates assume on loopback unless bottleneck_mbit is given
KEYS = ("loopback", "lab", "real", "source", "destination", "paths", "bottleneck_mbit")
REAL_KEYS = ("links", "source_set", "destination_set")


@dataclass(frozen=True)
class Topology:
    kind: Kind
    source: str | None = None
    """A lab host, or a registered agent's name; None on loopback."""
    destination: str | None = None
    paths: tuple[str, ...] = ()
    """Lab links, or registered links (names or ids); () on loopback."""
    bottleneck_mbit: float | None = None
    """None on loopback unless given (estimates then assume LOOPBACK_MBIT)."""
    lab: labspec.Spec | None = None
    lab_file: str | None = None
    """The spec file as given, relative to the repository; None when inline."""
    source_set: str | None = None
    """real: the volume set reservoir runs copy (a name or an id) ..."""
    destination_set: str | None = None
    """... and the one they overwrite."""

    @property
    def links(self) -> tuple[str, ...]:
        """The links an event may name: every link of the lab; none otherwise (the
        runner cannot cut a real link, and loopback has none)."""
        return tuple(lk.name for lk in self.lab.links) if self.lab is not None else ()

    @property
    def rtt_ms(self) -> float | None:
        """The longest round trip of the lab's paths (2 x the path link's delay)."""
        if self.lab is None:
            return None
        rtt = max(2 * self.lab.link(p).delay_ms for p in self.paths)
        return rtt or None

    def undelayed_paths(self) -> tuple[str, ...]:
        """Path links without a delay line: direct veths, shaped by TBF, with no loss."""
        if self.lab is None:
            return ()
        return tuple(p for p in self.paths if not self.lab.link(p).delayed)

    def spec_for(self, loss: float | None) -> labspec.Spec | None:
        """The lab spec to build, with ``loss`` on every path link (None: as written)."""
        if self.lab is None or loss is None:
            return self.lab
        links = tuple(
            replace(lk, loss=loss) if lk.name in self.paths else lk for lk in self.lab.links
        )
        return replace(self.lab, links=links)


def parse_topology(data: Any, root: Path, errors: list[str]) -> Topology | None:
    t = check.table("topology", data, errors)
    if t is None:
        return None
    check.unknown_keys("topology", t, KEYS, errors)
    kinds = [k for k in ("loopback", "lab", "real") if k in t]
    if len(kinds) != 1:
        errors.append(
            'topology: give one of loopback = true, lab = "config/lab/NAME.toml" (or'
            f" [topology.lab] tables), real = {{ links = [...] }}; got {kinds or 'none'}"
        )
        return None
    if kinds == ["loopback"]:
        return _loopback(t, errors)
    n_before = len(errors)
    source = check.text("topology.source", t.get("source"), errors)
    destination = check.text("topology.destination", t.get("destination"), errors)
    if source is not None and source == destination:
        errors.append(f"topology.destination: must differ from the source, both are {source!r}")
    bottleneck = check.number(
        "topology.bottleneck_mbit", t.get("bottleneck_mbit"), 0, MAX_MBIT, errors, above=True
    )
    sets: tuple[str | None, str | None] = (None, None)
    if kinds == ["real"]:
        paths, sets = _real_links(t, errors)
        spec, lab_file = None, None
    else:
        paths = check.values("topology.paths", t.get("paths"), check.text, errors)
        spec, lab_file = _lab(t["lab"], root, errors)
        if spec is not None and source and destination and paths and bottleneck:
            _check_lab(spec, (source, destination), paths, bottleneck, errors)
    if len(errors) > n_before or not (source and destination and paths and bottleneck):
        return None
    kind: Kind = "real" if spec is None else "lab"
    return Topology(kind, source, destination, paths, bottleneck, spec, lab_file, *sets)


def _loopback(t: dict[str, Any], errors: list[str]) -> Topology | None:
    if t["loopback"] is not True:
        errors.append(f"topology.loopback: must be true, got {t['loopback']!r}")
    for k in sorted(set(t) & {"source", "destination", "paths"}):
        errors.append(f"topology.{k}: not used with loopback = true")
    bottleneck = None
    if "bottleneck_mbit" in t:
        value = t["bottleneck_mbit"]
        bottleneck = check.number(
            "topology.bottleneck_mbit", value, 0, MAX_MBIT, errors, above=True
        )
    return Topology("loopback", bottleneck_mbit=bottleneck)


def _real_links(
    t: dict[str, Any], errors: list[str]
) -> tuple[tuple[str, ...] | None, tuple[str | None, str | None]]:
    """(links, (source_set, destination_set)) of ``real = {...}``."""
    if "paths" in t:
        errors.append("topology.paths: not used with real: the paths are real.links")
    real = check.table("topology.real", t["real"], errors)
    if real is None:
        return None, (None, None)
    check.unknown_keys("topology.real", real, REAL_KEYS, errors)
    links = check.values("topology.real.links", real.get("links"), check.text, errors)
    sets = [
        check.text(f"topology.real.{k}", real[k], errors) if k in real else None
        for k in REAL_KEYS[1:]
    ]
    if sets[0] is not None and sets[0] == sets[1]:
        errors.append(
            f"topology.real.destination_set: must differ from the source_set, both are {sets[0]!r}"
        )
    return links, (sets[0], sets[1])


def _lab(value: Any, root: Path, errors: list[str]) -> tuple[labspec.Spec | None, str | None]:
    if isinstance(value, dict):
        try:
            return labspec.parse(value), None
        except labspec.SpecError as e:
            errors += [f"topology.lab.{line}" for line in str(e).splitlines()]
            return None, None
    rel = PurePosixPath(value) if isinstance(value, str) else None
    if rel is None or rel.is_absolute() or ".." in rel.parts or rel.suffix != ".toml":
        errors.append(
            "topology.lab: must be a spec file relative to the repository, e.g."
            f' "config/lab/lfn-2x500m-100ms.toml", or [topology.lab] tables; got {value!r}'
        )
        return None, None
    try:
        return labspec.load(root / rel), str(rel)
    except labspec.SpecError as e:
        lines = str(e).splitlines()
        errors += [f"topology.lab: {lines[0]}", *(f"topology.lab:   {ln}" for ln in lines[1:])]
        return None, None


def _check_lab(
    spec: labspec.Spec,
    ends: tuple[str, str],
    paths: tuple[str, ...],
    bottleneck: float,
    errors: list[str],
) -> None:
    source = ends[0]
    hosts = [h.name for h in spec.hosts]
    for key, host in zip(("source", "destination"), ends, strict=True):
        if host not in hosts:
            errors.append(f"topology.{key}: {host!r} is not a host of the lab ({', '.join(hosts)})")
    links = {lk.name: lk for lk in spec.links}
    for i, name in enumerate(paths):
        link = links.get(name)
        if link is None:
            errors.append(
                f"topology.paths[{i}]: {name!r} is not a link of the lab ({', '.join(links)})"
            )
        elif source not in (link.a, link.b):
            errors.append(f"topology.paths[{i}]: link {name} does not touch the source {source}")
    for link in spec.links:
        if link.delayed and link.rate_mbit > MAX_LINE_MBIT:
            errors.append(
                f"topology.lab: link {link.name} goes through a delay line at {link.rate_mbit:g}"
                f" Mbit/s: keep each line under {MAX_LINE_MBIT} Mbit/s (design section 4)"
            )
    rates = [links[p].rate_mbit for p in paths if p in links]
    if len(rates) == len(paths) and all(rates) and bottleneck > sum(rates) * 1.0001:
        errors.append(
            f"topology.bottleneck_mbit: {bottleneck:g} is more than the paths carry"
            f" ({' + '.join(f'{r:g}' for r in rates)} Mbit/s)"
        )
