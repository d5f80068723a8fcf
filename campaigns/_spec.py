"""Campaign files: a topology, a matrix of scenarios, repetitions, events, a baseline
and a quick subset, read from TOML (config/campaigns/NAME.toml)::

    name = "lfn-2x500m-100ms"          # the file's name, without .toml
    description = "..."
    repetitions = 3                    # runs of every scenario (default 1)
    baseline = "iperf3"                # optional: see below

    [topology]                         # see _topology.py
    [matrix]                           # see _matrix.py
    [[event]]                          # see _events.py
    [quick]                            # optional: see _matrix.parse_quick

A file is validated as a whole: every problem is reported at once, one a line, each
naming its field (``matrix.streams[2]: must be an integer between 1 and 256, got 0``).

``baseline = "iperf3"`` makes iperf3 the reference of every reservoir scenario: the
iperf3 scenario with the same streams, pacing (and rate), cc and loss, memory to
memory over the same paths, in the same run (design section 6). Every reservoir (and
gridftp, xrdcp) scenario of the matrix, and of the quick subset, must have one in the
same set. Reservoir is also compared with the best of gridftp and xrdcp with the same
streams in the same run, where the matrix has them (results.py).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reservoir.campaigns import _check as check
from reservoir.campaigns._estimate import estimate_seconds
from reservoir.campaigns._events import check_events, parse_events
from reservoir.campaigns._matrix import Matrix, parse_matrix, parse_quick
from reservoir.campaigns._scenario import PEERS, Event, Scenario
from reservoir.campaigns._topology import Topology, parse_topology
from reservoir.campaigns.errors import CampaignError
from reservoir.lab import spec as labspec
from reservoir.shipped import config_dir, data_root

DATA_ROOT = data_root()
CAMPAIGN_DIR = config_dir() / "campaigns"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
KEYS = ("name", "description", "repetitions", "baseline", "topology", "matrix", "event", "quick")
BASELINES = ("iperf3",)


class CampaignFileError(CampaignError):
    """A campaign that cannot be run; the message lists every problem, one a line."""


@dataclass(frozen=True)
class Campaign:
    name: str
    description: str
    topology: Topology
    matrix: Matrix
    repetitions: int = 1
    events: tuple[Event, ...] = ()
    baseline: str | None = None
    quick_matrix: Matrix | None = None
    """The matrix restricted to the quick subset; None: no quick subset."""
    quick_repetitions: int = 1

    def scenarios(self) -> tuple[Scenario, ...]:
        return self.matrix.expand(self.events)

    def quick(self) -> tuple[Scenario, ...]:
        """The quick subset (for ``make bench``): scenarios of the campaign."""
        return () if self.quick_matrix is None else self.quick_matrix.expand(self.events)

    def baseline_for(
        self, scenario: Scenario, among: Sequence[Scenario] | None = None
    ) -> Scenario | None:
        """The iperf3 scenario ``scenario`` (reservoir) is compared with, among
        ``among`` (default: all the scenarios); None without a baseline."""
        if self.baseline is None or scenario.tool == self.baseline:
            return None
        key = _baseline_key(scenario)
        pool = self.scenarios() if among is None else among
        return next((s for s in pool if s.tool == self.baseline and _baseline_key(s) == key), None)

    def lab_spec(self, scenario: Scenario) -> labspec.Spec | None:
        """The lab to build for ``scenario`` (its loss on the paths); None without a lab."""
        return self.topology.spec_for(scenario.loss)

    def estimate_seconds(self, quick: bool = False) -> float:
        """The time the campaign (or its quick subset) takes, by the model of
        _estimate.py: run lengths at the expected rate, plus setup costs."""
        if quick:
            return estimate_seconds(self.quick(), self.quick_repetitions, self.topology)
        return estimate_seconds(self.scenarios(), self.repetitions, self.topology)


def _baseline_key(s: Scenario) -> tuple[object, ...]:
    return (s.streams, s.pacing, s.pacing_rate_mbit, s.cc, s.loss)


def shipped() -> list[Path]:
    """The campaign files of config/campaigns, by name."""
    return sorted(CAMPAIGN_DIR.glob("*.toml"))


def load(path: Path, root: Path = DATA_ROOT) -> Campaign:
    """Read and validate a campaign file; its ``name`` must be the file's name. Lab spec
    files are relative to ``root``, the folder holding config/ (the checkout, or the
    installed package)."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise CampaignFileError(f"{path}: cannot read: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise CampaignFileError(f"{path}: not valid TOML: {e}") from e
    try:
        return parse(data, root=root, name=Path(path).stem)
    except CampaignFileError as e:
        raise CampaignFileError(f"{path}:\n{e}") from e


def parse(data: dict[str, Any], root: Path = DATA_ROOT, name: str | None = None) -> Campaign:
    """Validate a campaign already read from TOML; ``name``, if given, is the name the
    file must carry."""
    errors: list[str] = []
    check.unknown_keys("", data, KEYS, errors)
    own_name = _name(data.get("name"), name, errors)
    description = check.text("description", data.get("description"), errors)
    repetitions = check.integer("repetitions", data.get("repetitions", 1), 1, 100, errors)
    baseline = None
    if "baseline" in data:
        baseline = check.choice("baseline", data["baseline"], BASELINES, errors)
    topology = parse_topology(data.get("topology"), root, errors)
    matrix = parse_matrix(data.get("matrix"), errors)
    events = parse_events(data.get("event", []), errors)
    quick = parse_quick(data["quick"], matrix, errors) if "quick" in data else None
    if topology is not None and matrix is not None:
        _check_fit(topology, matrix, errors)
        if events is not None:
            check_events(events, topology, matrix, errors)
    if matrix is not None and events is not None:
        _check_scenarios(matrix, events, quick, baseline, errors)
    if errors:
        raise CampaignFileError("\n".join(errors))
    assert own_name and description and repetitions and topology and matrix
    assert events is not None
    quick_matrix, quick_reps = quick if quick is not None else (None, 1)
    return Campaign(
        own_name, description, topology, matrix, repetitions, events, baseline,
        quick_matrix, quick_reps,
    )  # fmt: skip


def _name(value: Any, expected: str | None, errors: list[str]) -> str | None:
    if not isinstance(value, str) or not NAME_RE.match(value):
        errors.append(f"name: must match {NAME_RE.pattern}, got {value!r}")
        return None
    if expected is not None and value != expected:
        errors.append(f"name: must be the file's name without .toml ({expected}), got {value!r}")
        return None
    return value


def _check_fit(topology: Topology, matrix: Matrix, errors: list[str]) -> None:
    """The matrix against what the topology can do."""
    if matrix.loss and topology.kind != "lab":
        errors.append(f"matrix.loss: only a lab can add loss, the topology is {topology.kind}")
    elif any(matrix.loss) and topology.undelayed_paths():
        names = ", ".join(topology.undelayed_paths())
        errors.append(
            f"matrix.loss: paths without a delay line cannot drop packets ({names}: a direct"
            " veth shaped by TBF); give them delay_ms > 0"
        )
    if "mptcp" in matrix.multilink and "reservoir" in matrix.tool and len(topology.paths) < 2:
        errors.append(
            f"matrix.multilink: mptcp needs 2 paths or more, the topology has {len(topology.paths)}"
        )
    if topology.kind == "loopback" and set(matrix.pacing) - {"off"}:
        errors.append("matrix.pacing: loopback has no NIC or link rate to pace at; use off")
    peers = [t for t in matrix.tool if t in PEERS]
    if topology.kind == "real" and peers:
        errors.append(
            f"matrix.tool: {' and '.join(peers)} need a lab or loopback topology (the runner"
            " starts their servers in the destination's namespace); a real topology runs"
            " iperf3 and reservoir only"
        )
    if topology.kind == "real" and "reservoir" in matrix.tool:
        for key in ("source_set", "destination_set"):
            if getattr(topology, key) is None:
                errors.append(
                    f"topology.real.{key}: reservoir runs copy between registered volume"
                    " sets; name them (source_set is read, destination_set overwritten)"
                )


def _check_scenarios(
    matrix: Matrix,
    events: tuple[Event, ...],
    quick: tuple[Matrix, int] | None,
    baseline: str | None,
    errors: list[str],
) -> None:
    scenarios = matrix.expand(events)
    if not scenarios:
        errors.append("matrix: every scenario is excluded")
    names = [s.name for s in scenarios]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        errors.append(f"matrix: two scenarios are named {dup}")
    quick_scenarios = quick[0].expand(events) if quick is not None else None
    if quick_scenarios == ():
        errors.append("quick: selects no scenario (after matrix.exclude)")
    if baseline is None:
        return
    if not {baseline, "reservoir"} <= set(matrix.tool):
        errors.append(f"baseline: needs both {baseline} and reservoir in matrix.tool")
        return
    _check_baselines("baseline", scenarios, baseline, errors)
    if quick_scenarios:
        _check_baselines("quick", quick_scenarios, baseline, errors)


def _check_baselines(
    where: str, scenarios: Sequence[Scenario], baseline: str, errors: list[str]
) -> None:
    keys = {_baseline_key(s) for s in scenarios if s.tool == baseline}
    missing = [s.name for s in scenarios if s.tool != baseline and _baseline_key(s) not in keys]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        errors.append(
            f"{where}: {missing[0]}{more} has no {baseline} scenario with the same streams,"
            f" pacing, pacing_rate_mbit, cc and loss"
        )
