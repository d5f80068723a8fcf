"""``reservoir campaign run`` on a registered network (``topology.real``): a lab stands
in for the WAN, with a coordinator and two agents registered in it as an operator
would; the campaign knows only the coordinator's URL, a user token and the names of
the agents, links and volume sets. iperf3 goes through the agents' control API (by way
of the coordinator), copies are transfers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.campaigns import load
from reservoir.campaigns.results import CampaignRun
from reservoir.campaigns.run.site import Site, place, site

from .conftest import need_lab

SIZE = 48 << 20

LAB = """
name = "lab"
description = "the network the real campaign runs on"

[topology]
source = "src"
destination = "dst"
paths = ["l1", "l2"]
bottleneck_mbit = 200

[[topology.lab.host]]
name = "src"
[[topology.lab.host]]
name = "dst"

[[topology.lab.link]]
name = "l1"
a = "src"
b = "dst"
a_addr = "10.213.1.1/24"
b_addr = "10.213.1.2/24"
rate_mbit = 100
delay_ms = 5

[[topology.lab.link]]
name = "l2"
a = "src"
b = "dst"
a_addr = "10.213.2.1/24"
b_addr = "10.213.2.2/24"
rate_mbit = 100
delay_ms = 5

[matrix]
tool = "iperf3"
streams = 1
pacing = "off"
duration_s = 1
"""

REAL = """
name = "{name}"
description = "two registered links"
baseline = "iperf3"

[topology]
real = {{ links = [{links}], source_set = "src-set", destination_set = "dst-set" }}
source = "{source}"
destination = "{destination}"
bottleneck_mbit = 200

[matrix]
tool = ["iperf3", "reservoir"]
streams = 4
pacing = "per-nic"
equalizer = true
duration_s = 4
size = {size}
"""


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The lab, its agents and coordinator, everything registered (``run/site.py``)."""
    need_lab()
    work = tmp_path_factory.mktemp("real")
    (work / "lab.toml").write_text(LAB)
    c = load(work / "lab.toml")
    with place(c.topology, c.topology.lab) as p, site(p, work, SIZE) as s:
        yield s


def run(s: Site, tmp_path: Path, links: str, size: int = SIZE) -> tuple[int, str, Path]:
    text = REAL.format(
        name="real", links=links, source=s.src.name, destination=s.dst.name, size=size
    )
    (tmp_path / "real.toml").write_text(text)
    (tmp_path / "token").write_text(s.coordinator.user_token + "\n")
    out = tmp_path / "out"
    argv = ["ip", "netns", "exec", s.place.src_ns, sys.executable, "-m", "reservoir"]
    argv += ["campaign", "run", str(tmp_path / "real.toml"), "--out", str(out)]
    argv += ["--coordinator", s.coordinator.api, "--token-file", str(tmp_path / "token")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
    return done.returncode, done.stdout + done.stderr, out


def test_a_campaign_on_registered_links_runs_iperf3_through_the_agents_and_a_transfer(
    registered: Site, tmp_path: Path
) -> None:
    code, text, out = run(registered, tmp_path, '"l1", "l2"')
    assert code == 0, text[-3000:]
    print(text[-1500:])
    result = CampaignRun.load(out / "results.json")
    assert result.topology.kind == "real"
    assert [(p.name, p.rate_bps) for p in result.topology.paths] == [("l1", 1e8), ("l2", 1e8)]
    iperf3, reservoir = result.runs
    assert all(r.ok for r in result.runs), [r.error for r in result.runs]
    assert len(iperf3.streams) == 4
    assert {s.path for s in iperf3.streams} == {"l1", "l2"}
    assert reservoir.verified is True and reservoir.bytes == SIZE
    for r in result.runs:
        assert 0 < r.goodput_bps < 200e6 * 1.05, r.goodput_bps  # no more than the links carry
        assert r.cpu_seconds > 0 and r.intervals


def test_a_link_the_coordinator_does_not_have_is_refused_before_anything_runs(
    registered: Site, tmp_path: Path
) -> None:
    code, text, out = run(registered, tmp_path, '"l1", "l9"')
    assert code == 2, text[-3000:]
    assert "topology.real.links[1]: no link 'l9' is registered (there are: l1, l2)" in text
    assert CampaignRun.load(out / "results.json").runs == []


def test_a_size_other_than_the_volume_sets_is_refused(registered: Site, tmp_path: Path) -> None:
    code, text, _ = run(registered, tmp_path, '"l1"', size=SIZE // 2)
    assert code == 2, text[-3000:]
    assert (
        f"matrix.size: a reservoir run copies the whole volume set src-set ({SIZE} bytes)" in text
    )
