"""``reservoir campaign run`` end to end: small campaigns on a real lab (namespaces,
delay lines, TBF), real iperf3, real agents and coordinator; the results file, the
progress file, the report, the exit codes, and nothing left behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from reservoir.campaigns.results import CampaignRun
from reservoir.lab import netns

from .conftest import need_lab

TWO_PATHS = """
name = "{name}"
description = "two 100 Mbit/s paths, 10 ms RTT, l1 cut and restored"
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
a_addr = "10.211.1.1/24"
b_addr = "10.211.1.2/24"
rate_mbit = 100
delay_ms = 5

[[topology.lab.link]]
name = "l2"
a = "src"
b = "dst"
a_addr = "10.211.2.1/24"
b_addr = "10.211.2.2/24"
rate_mbit = 100
delay_ms = 5

[matrix]
tool = ["iperf3", "reservoir"]
streams = 4
pacing = "per-nic"
equalizer = true
duration_s = 6
size = "96MiB"

[[event]]
at_s = 1.5
action = "link-down"
link = "l1"

[[event]]
at_s = 3.5
action = "link-up"
link = "l1"
"""

TWO_LOSSES = """
name = "{name}"
description = "one 100 Mbit/s path, 10 ms RTT, built twice: without loss and with 1e-4"

[topology]
source = "src"
destination = "dst"
paths = ["l1"]
bottleneck_mbit = 100

[[topology.lab.host]]
name = "src"
[[topology.lab.host]]
name = "dst"

[[topology.lab.link]]
name = "l1"
a = "src"
b = "dst"
a_addr = "10.212.1.1/24"
b_addr = "10.212.1.2/24"
rate_mbit = 100
delay_ms = 5

[matrix]
tool = "reservoir"
streams = 2
pacing = "off"
equalizer = false
loss = [0, 1e-4]
size = "32MiB"
"""

LOOPBACK = """
name = "{name}"
description = "loopback, 2 streams"
baseline = "iperf3"

[topology]
loopback = true

[matrix]
tool = ["iperf3", "reservoir"]
streams = 2
pacing = "off"
equalizer = false
duration_s = 2
size = "{size}"
"""


def write(tmp_path: Path, text: str, name: str, **fields: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text.format(name=name, **fields))
    return path


def campaign(args: list[str], **kw: Any) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "reservoir", "campaign", "run", *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"campaign still running after {timeout} s:\n{out[-3000:]}")
    return proc.returncode, out


def test_a_two_path_campaign_records_iperf3_and_a_verified_transfer_with_failover(
    tmp_path: Path,
) -> None:
    need_lab()
    before = set(netns.names())
    out = tmp_path / "out"
    code, text = finish(
        campaign([str(write(tmp_path, TWO_PATHS, "two-paths")), "--out", str(out)]), 240
    )
    assert code == 0, text[-3000:]
    result = CampaignRun.load(out / "results.json")
    assert result.finished is not None
    iperf3, reservoir = result.runs
    assert (iperf3.scenario.tool, reservoir.scenario.tool) == ("iperf3", "reservoir")
    assert all(r.ok for r in result.runs), [r.error for r in result.runs]
    assert reservoir.verified is True and reservoir.bytes == 96 << 20
    for r in result.runs:
        assert len(r.streams) == 4
        assert {s.path for s in r.streams} == {"l1", "l2"}
        assert [e.kind for e in r.events if e.kind.startswith("link")] == ["link-down", "link-up"]
        assert r.failover is not None
        assert 0 < r.goodput_bps < 200e6 * 1.05  # no more than the two paths carry
        assert r.cpu_seconds > 0 and r.intervals
        assert r.lab_late is not None  # the delay lines were asked what they released late
    assert reservoir.jain is not None and 0.25 <= reservoir.jain <= 1.0
    progress = json.loads((out / "progress.json").read_text())
    assert (progress["state"], progress["done"], progress["total"]) == ("completed", 2, 2)
    assert "<svg" in (out / "report.html").read_text()
    assert set(netns.names()) == before  # the lab is gone


def test_every_loss_value_gets_its_own_lab_and_a_fresh_coordinator(tmp_path: Path) -> None:
    need_lab()
    out = tmp_path / "out"
    path = write(tmp_path, TWO_LOSSES, "two-losses")
    code, text = finish(campaign([str(path), "--out", str(out)]), 180)
    assert code == 0, text[-3000:]
    result = CampaignRun.load(out / "results.json")
    assert [r.scenario.loss for r in result.runs] == [0.0, 1e-4]
    assert all(r.ok and r.verified for r in result.runs), [r.error for r in result.runs]


def test_a_loopback_campaign_compares_the_copy_with_iperf3(tmp_path: Path) -> None:
    """Also with a relative --out (as make bench gives): the agents' files still
    name each other right."""
    need_lab()
    out = tmp_path / "rel" / "out"
    path = write(tmp_path, LOOPBACK, "loop", size="128MiB")
    code, text = finish(campaign([str(path), "--out", "rel/out"], cwd=tmp_path), 120)
    assert code == 0, text[-3000:]
    assert "reservoir-s2-pacing_off-eq_off-paths-bbr-128MiB" in text  # the summary table
    result = CampaignRun.load(out / "results.json")
    assert [r.scenario.tool for r in result.runs] == ["iperf3", "reservoir"]
    assert result.runs[1].verified is True
    assert [s.path for s in result.runs[0].streams] == [None, None]


def test_a_bad_campaign_file_exits_2_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\ndescription = "x"\n[topology]\nloopback = true\n')
    code, text = finish(campaign([str(path), "--out", str(tmp_path / "out")]), 60)
    assert code == 2
    assert "matrix" in text


def test_sigterm_stops_the_campaign_keeps_its_runs_and_removes_the_lab(tmp_path: Path) -> None:
    need_lab()
    before = set(netns.names())
    out = tmp_path / "out"
    path = write(tmp_path, LOOPBACK, "loop", size="4GiB")  # longer than the test waits
    proc = campaign([str(path), "--out", str(out)])
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        progress = out / "progress.json"
        if progress.exists() and json.loads(progress.read_text())["done"] >= 1:
            break
        time.sleep(0.2)
    time.sleep(2)  # into the reservoir run (its site starting or copying)
    proc.send_signal(signal.SIGTERM)
    code, text = finish(proc, 60)
    assert code == 143, text[-3000:]
    assert json.loads((out / "progress.json").read_text())["state"] == "cancelled"
    result = CampaignRun.load(out / "results.json")
    assert [r.scenario.tool for r in result.runs] == ["iperf3"]
    assert set(netns.names()) == before
