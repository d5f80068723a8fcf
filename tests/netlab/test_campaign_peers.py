"""gridftp and xrdcp runs of ``reservoir campaign run``: servers in the destination's
namespace, clients in the source's, over two paths through delay lines (each path
carrying its part of the source) and on loopback; the copies verified, their figures
recorded, nothing left behind."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from reservoir.campaigns.results import CampaignRun, summary_rows
from reservoir.lab import netns

from .conftest import need_lab
from .test_campaign_run import campaign, finish, write

BINARIES = ("globus-gridftp-server", "globus-url-copy", "xrootd", "xrdcp")

TWO_PATHS = """
name = "{name}"
description = "two 100 Mbit/s paths, 10 ms RTT: the peers and reservoir"
baseline = "iperf3"

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
tool = ["iperf3", "reservoir", "gridftp", "xrdcp"]
streams = 4
pacing = "per-nic"
equalizer = true
duration_s = 2
size = "32MiB"
"""

LOOPBACK = """
name = "{name}"
description = "the peers on loopback, 20 streams (xrdcp takes 15)"

[topology]
loopback = true

[matrix]
tool = ["gridftp", "xrdcp"]
streams = 20
pacing = "off"
size = "64MiB"
"""


def need_peers() -> None:
    need_lab()
    for binary in BINARIES:
        if shutil.which(binary) is None:
            pytest.skip(f"{binary} is not installed (run make install)")


def leftovers() -> set[str]:
    """The peers' directories in the temporary folder (servers' state, destinations)."""
    temp = Path(tempfile.gettempdir())
    return {p.name for p in temp.iterdir() if p.name.startswith(("gridftp-", "xrdcp-", "dest"))}


def test_peers_copy_over_two_delayed_paths_beside_reservoir(tmp_path: Path) -> None:
    need_peers()
    temp_before = leftovers()
    out = tmp_path / "out"
    path = write(tmp_path, TWO_PATHS, "two-paths-peers")
    code, text = finish(campaign([str(path), "--out", str(out)]), 240)
    assert code == 0, text[-3000:]
    result = CampaignRun.load(out / "results.json")
    runs = {r.scenario.tool: r for r in result.runs}
    assert set(runs) == {"iperf3", "reservoir", "gridftp", "xrdcp"}
    for tool in ("gridftp", "xrdcp"):
        r = runs[tool]
        assert r.ok and r.verified is True, r.error
        assert r.bytes == 32 << 20 and r.scenario.equalizer is None
        assert 0 < r.goodput_bps < 200e6 * 1.05  # no more than the two paths carry
        assert r.cpu_seconds > 0 and any(e.detail.startswith("CPU: client") for e in r.events)
    rows = {row.tool: row for row in summary_rows(result)}
    assert rows["reservoir"].of_peers is not None and rows["reservoir"].peer is not None
    (site,) = (out / "work").glob("site-rsv*")  # site-PREFIX-SIZE: the lab's prefix
    prefix = site.name.split("-")[1]
    assert not [ns for ns in netns.names() if ns.startswith(prefix)]  # the lab is gone
    assert leftovers() == temp_before
    assert not list((out / "work").glob("peer-*"))  # the peers' source and parts too


def test_peers_copy_on_loopback_in_the_campaigns_namespace(tmp_path: Path) -> None:
    need_peers()
    out = tmp_path / "out"
    path = write(tmp_path, LOOPBACK, "loop-peers")
    code, text = finish(campaign([str(path), "--out", str(out)]), 120)
    assert code == 0, text[-3000:]
    gridftp, xrdcp = CampaignRun.load(out / "results.json").runs
    assert (gridftp.scenario.tool, xrdcp.scenario.tool) == ("gridftp", "xrdcp")
    assert gridftp.verified is True and xrdcp.verified is True
    notes = [e.detail for e in xrdcp.events if e.kind == "note"]
    assert notes[0] == "xrdcp: 20 streams asked, 15 used"
