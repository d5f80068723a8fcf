"""The campaign runner's decisions, without a lab: the order of the runs, what iperf3
and the coordinator are asked for, the progress file and the ETA."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path
from typing import Any, cast

import pytest

from reservoir.campaigns import Scenario, load
from reservoir.campaigns._scenario import Tool
from reservoir.campaigns._spec import CAMPAIGN_DIR
from reservoir.campaigns.results import LabLateness, Run, Sample, Stream
from reservoir.campaigns.results import Scenario as ResultScenario
from reservoir.campaigns.run.iperf3_remote import run_body, streams_of
from reservoir.campaigns.run.iperf3_run import client_argv, legs
from reservoir.campaigns.run.progress import Progress
from reservoir.campaigns.run.reservoir_run import _seconds, path_namer, transfer_body
from reservoir.campaigns.run.runner import _late_between, plan, topology_record
from reservoir.campaigns.run.site import PathEnds, Place, Site
from reservoir.campaigns.run.timeline import nic_rates
from reservoir.lab.network import Lab

LOSSY = CAMPAIGN_DIR / "lossy.toml"


def place(*rates: float) -> Place:
    paths = [
        PathEnds(f"l{i + 1}", f"10.0.{i + 1}.1", f"10.0.{i + 1}.2", r, 100.0, 1500)
        for i, r in enumerate(rates)
    ]
    return Place(cast("Lab", None), "src", "dst", paths)


def test_runs_go_round_the_scenarios_per_repetition_inside_each_loss() -> None:
    campaign = load(LOSSY)
    runs = plan(campaign, quick=False)
    assert len(runs) == len(campaign.scenarios()) * campaign.repetitions
    losses = [sc.loss for sc, _ in runs]
    changes = [b for a, b in itertools.pairwise(losses) if a != b]
    assert changes == [1e-4, 1e-3]  # one lab per loss, in the matrix's order
    first_loss = [(sc.name, rep) for sc, rep in runs if sc.loss == 0]
    n = len(first_loss) // 2
    assert [rep for _, rep in first_loss] == [1] * n + [2] * n
    assert [name for name, _ in first_loss[:n]] == [name for name, _ in first_loss[n:]]


def test_the_quick_plan_is_the_quick_subset_once() -> None:
    campaign = load(LOSSY)
    runs = plan(campaign, quick=True)
    assert [sc for sc, _ in runs] == list(campaign.quick())
    assert {rep for _, rep in runs} == {1}


def test_iperf3_streams_go_round_the_paths_like_reservoirs() -> None:
    got = legs(place(500e6, 500e6, 500e6), 7)
    assert [(g.path, g.streams, g.port) for g in got] == [
        ("l1", 3, 5301),
        ("l2", 2, 5302),
        ("l3", 2, 5303),
    ]
    assert [g.path for g in legs(place(500e6, 500e6), 1)] == ["l1"]


def test_iperf3_streams_are_dealt_by_capacity_like_a_copys() -> None:
    got = legs(place(585e6, 293e6, 122e6), 24)
    assert [(g.path, g.streams) for g in got] == [("l1", 14), ("l2", 7), ("l3", 3)]


def test_loopback_iperf3_is_one_client_on_127_0_0_1() -> None:
    (leg,) = legs(Place(cast("Lab", None), "local", "local", []), 8)
    assert (leg.path, leg.src, leg.dst, leg.streams) == (None, "127.0.0.1", "127.0.0.1", 8)


def scenario(tool: Tool = "iperf3", **fields: Any) -> Scenario:
    """A scenario as the matrix expands it (iperf3: a duration; reservoir: a size)."""
    values: dict[str, Any] = {
        "name": "t",
        "tool": tool,
        "streams": 4,
        "pacing": "off",
        "pacing_rate_mbit": None,
        "equalizer": None if tool == "iperf3" else False,
        "multilink": "paths",
        "cc": "bbr",
        "loss": None,
        "duration_s": 30.0 if tool == "iperf3" else None,
        "size_bytes": None if tool == "iperf3" else 1 << 30,
    }
    return Scenario(**{**values, **fields})


def test_the_iperf3_client_asks_for_its_streams_length_cc_and_json() -> None:
    leg = legs(place(500e6), 4)[0]
    argv = client_argv(leg, scenario(cc="cubic"), None)
    assert argv[:2] == ["iperf3", "-c"]
    for flag, value in (("-c", "10.0.1.2"), ("-B", "10.0.1.1"), ("-P", "4"), ("-t", "30"),
                        ("-C", "cubic")):  # fmt: skip
        assert argv[argv.index(flag) + 1] == value
    assert "-J" in argv and "--fq-rate" not in argv


def test_per_socket_pacing_gives_each_iperf3_stream_its_payload_share() -> None:
    leg = legs(place(500e6), 4)[0]
    argv = client_argv(leg, scenario(pacing="per-socket"), 400e6)
    rate = int(argv[argv.index("--fq-rate") + 1])
    assert rate == int(400e6 * 1448 / 1514 / 4)


def test_an_agents_iperf3_run_asks_for_its_path_streams_cc_and_pacing() -> None:
    leg = legs(place(500e6, 500e6), 5)[0]  # l1: streams 0, 2, 4
    body = run_body(leg, 5201, scenario(cc="cubic"), "eth1", None)
    assert body == {"host": "10.0.1.2", "port": 5201, "streams": 3, "duration": 30,
                    "bind": "10.0.1.1", "congestion": "cubic"}  # fmt: skip
    paced = run_body(leg, 5201, scenario(pacing="per-nic"), "eth1", 475e6)
    assert (paced["nic"], paced["nic_pacing_bps"]) == ("eth1", 475_000_000)
    per_socket = run_body(leg, 5201, scenario(pacing="per-socket"), "eth1", 475e6)
    assert per_socket["fq_rate_bps"] == int(475e6 * 1448 / 1514 / 3) and "nic" not in per_socket


def test_an_agents_iperf3_result_becomes_one_stream_per_socket() -> None:
    result = {"stream_bits_per_second": [[1e6, 2e6, 3e6], [4e6, 5e6, 6e6]],
              "stream_retransmits": [7, None]}  # fmt: skip
    a, b = streams_of(result, 0.25, "l2", "l2.1.")
    assert (a.id, a.path, b.id) == ("l2.1.0", "l2", "l2.1.1")
    assert [(x.t, x.bps) for x in a.samples] == [(1.25, 1e6), (2.25, 2e6), (3.25, 3e6)]
    assert [x.retransmits for x in a.samples] == [None, None, 7]
    assert all(x.retransmits is None for x in b.samples)


def test_nic_rates_are_the_plan_or_the_scenarios_rate() -> None:
    p = place(500e6, 200e6)
    assert nic_rates(p, scenario(pacing="off")) == {}
    assert nic_rates(p, scenario(pacing="per-nic")) == {"l1": 475e6, "l2": 190e6}
    got = nic_rates(p, scenario(pacing="per-nic", pacing_rate_mbit=300))
    assert got == {"l1": 300e6, "l2": 300e6}


def site(p: Place) -> Site:
    s = cast("Site", type("FakeSite", (), {"paths": p.paths})())
    s.body = {"source": "a", "destination": "b", "paths": ["x"], "verify": True}
    return s


def test_the_transfer_asks_for_the_scenarios_streams_pacing_and_equalizer() -> None:
    body = transfer_body(site(place(500e6)), scenario("reservoir", equalizer=True))
    assert body["streams_per_pair"] == 4
    assert body["equalizer"] is True
    assert body["pacing"] == {"policy": "off", "margin": 0.05}
    assert body["multilink"] == "paths"
    assert (
        transfer_body(site(place(500e6)), scenario("reservoir", multilink="mptcp"))["multilink"]
        == "mptcp"
    )
    assert body["paths"] == ["x"] and body["verify"] is True


def test_the_transfer_asks_for_the_scenarios_verification_mode() -> None:
    receipt = scenario("reservoir", verify="receipt")
    assert transfer_body(site(place(500e6)), receipt)["verification"] == "receipt"
    assert transfer_body(site(place(500e6)), scenario("reservoir"))["verification"] == "storage"


def test_a_reservoir_run_lasts_from_the_transfers_creation_to_its_completion() -> None:
    done = {"created_at": "2026-11-27T10:00:00.250000", "completed_at": "2026-11-27T10:00:04"}
    assert _seconds(done, observed=4.6) == 3.75  # the poll saw it 0.85 s later
    assert _seconds({**done, "completed_at": None}, observed=4.6) == 4.6
    assert _seconds(done, observed=3.0) == 3.0  # the coordinator's clock disagrees: ours


def test_a_pacing_rate_becomes_the_plans_margin_below_the_slowest_link() -> None:
    sc = scenario("reservoir", pacing="per-nic", pacing_rate_mbit=400)
    body = transfer_body(site(place(500e6, 800e6)), sc)
    assert body["pacing"] == {"policy": "per-nic", "margin": 0.2}


def test_telemetry_paths_are_named_by_link_or_by_the_local_address() -> None:
    name = path_namer(site(place(500e6, 500e6)))
    assert name("l2") == "l2"
    assert name("10.0.2.1=10.0.2.2:3260") == "l2"
    assert name("10.9.9.9=10.0.2.2:3260") is None
    assert name(None) is None


def test_the_results_topology_has_every_path_with_its_rate_rtt_and_loss() -> None:
    topo = topology_record(load(CAMPAIGN_DIR / "sc2003-scaled.toml"))
    assert topo.kind == "lab" and topo.bottleneck_bps == 1e9
    assert [(p.name, p.rate_bps, p.rtt_ms) for p in topo.paths] == [
        ("l1", 585e6, 350.0),
        ("l2", 293e6, 350.0),
        ("l3", 122e6, 350.0),
    ]
    loop = topology_record(load(CAMPAIGN_DIR / "loopback.toml"))
    assert (loop.kind, loop.bottleneck_bps, loop.paths) == ("loopback", None, [])


def run(seconds: float, error: str | None = None) -> Run:
    sc = ResultScenario("s", "iperf3", 4)
    return Run(sc, 1, 0.0, seconds, 10**9, 8e9 / seconds, 1.5, error=error)


def progress(tmp_path: Path, estimates: list[float]) -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    return Progress(tmp_path, estimates, stream=out), out


def read(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "progress.json").read_text())
    return data


def test_progress_json_says_which_run_and_how_many_are_done(tmp_path: Path) -> None:
    prog, _ = progress(tmp_path, [10.0, 10.0, 10.0])
    prog.begin("iperf3-s4", 2)
    got = read(tmp_path)
    assert (got["state"], got["done"], got["total"]) == ("running", 0, 3)
    assert (got["scenario"], got["repetition"]) == ("iperf3-s4", 2)
    prog.end(run(5.0))
    prog.finish("completed")
    got = read(tmp_path)
    assert (got["state"], got["done"], got["scenario"], got["eta_s"]) == (
        "completed",
        1,
        None,
        None,
    )


def test_the_eta_scales_the_model_by_how_the_finished_runs_compared(tmp_path: Path) -> None:
    prog, _ = progress(tmp_path, [10.0, 20.0, 30.0])
    assert prog.eta_s() == pytest.approx(60.0)
    prog.done, prog._spent = 1, 20.0  # the first run took twice the model's time
    assert prog.eta_s() == pytest.approx(100.0)
    assert prog.eta_s(0.5) == pytest.approx(80.0)


def test_a_finished_run_is_one_line_with_its_figures_or_its_error(tmp_path: Path) -> None:
    prog, out = progress(tmp_path, [10.0, 10.0])
    prog.begin("a", 1)
    prog.end(run(2.0))
    prog.begin("b", 1)
    prog.end(run(0.5, error="iperf3: unable to connect"))
    text = out.getvalue()
    assert "1.00 GB in 2.0 s: 4.00 Gbit/s, CPU 1.5 s\n" in text  # iperf3: no stream limits
    assert "FAILED after 0.5 s: iperf3: unable to connect" in text


def test_a_reservoir_run_says_how_idle_and_limited_its_streams_were(tmp_path: Path) -> None:
    prog, out = progress(tmp_path, [10.0])
    done = run(2.0)
    done.streams = [Stream("0.0", "l1", [Sample(1.0, 1e6, busy=0.6, rwnd_limited=0.1)])]
    prog.begin("a", 1)
    prog.end(done)
    assert "; streams idle 40%, rwnd-limited 10%, sndbuf-limited 0%" in out.getvalue()


def test_the_frames_released_late_during_a_run_are_the_difference_of_two_readings() -> None:
    # (late frames since the start, the latest of them in us since the reading before)
    before = {"l1 a->b": (3, 500_000), "l1 b->a": (0, 0)}
    after = {"l1 a->b": (20, 299_301), "l1 b->a": (1, 2_500), "l2 a->b": (4, 3_000)}
    assert _late_between(before, after) == LabLateness(22, 299.301)
