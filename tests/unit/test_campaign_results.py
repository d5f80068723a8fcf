"""Campaign results: JSON round trip and validation, Jain and window means, the summary."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from reservoir.campaigns.results import (
    CampaignRun,
    Event,
    Failover,
    Interval,
    LabLateness,
    Machine,
    PathInfo,
    ResultsError,
    Run,
    Sample,
    Scenario,
    Stream,
    Topology,
    data_samples,
    format_lab_late,
    format_results,
    format_summary,
    jain,
    run_jain,
    stream_limits,
    summary_rows,
    window_means,
)


def scenario(name: str, tool: str = "reservoir", streams: int = 4, **kw: Any) -> Scenario:
    equalizer = kw.pop("equalizer", True if tool == "reservoir" else None)
    return Scenario(name=name, tool=tool, streams=streams, equalizer=equalizer, **kw)  # type: ignore[arg-type]


def run(
    sc: Scenario,
    rep: int = 0,
    *,
    goodput: float = 900e6,
    seconds: float = 10.0,
    rates: list[float] | None = None,
    **kw: Any,
) -> Run:
    """A run whose streams carry ``rates`` (default: equal shares) every second."""
    rates = rates if rates is not None else [goodput / sc.streams] * sc.streams
    ticks = [float(t) for t in range(1, int(seconds) + 1)]
    streams = [
        Stream(
            id=f"s{k}",
            path="l1" if k % 2 == 0 else "l2",
            samples=[Sample(t, r, cwnd_bytes=1 << 20, rtt_us=100_000) for t in ticks],
        )
        for k, r in enumerate(rates)
    ]
    defaults: dict[str, Any] = {
        "started": 1_700_000_000.0 + rep * 100,
        "seconds": seconds,
        "bytes": int(goodput * seconds / 8),
        "goodput_bps": goodput,
        "cpu_seconds": 2.5,
        "intervals": [Interval(t, goodput) for t in ticks],
        "streams": streams,
    }
    defaults.update(kw)
    return Run(scenario=sc, repetition=rep, **defaults)


def campaign(runs: list[Run], kind: str = "lab", bottleneck: float | None = 1e9) -> CampaignRun:
    return CampaignRun(
        campaign="lfn-2x500m",
        run_id="20240101-120000",
        started=1_700_000_000.0,
        finished=1_700_000_900.5,
        machine=Machine(cores=2, kernel="6.18.0", cc_available=["bbr", "cubic"]),
        topology=Topology(
            kind=kind,  # type: ignore[arg-type]
            spec="config/lab/lfn-2x500m-100ms.toml",
            bottleneck_bps=bottleneck,
            paths=[PathInfo("l1", 500e6, 100.0, 0.0), PathInfo("l2", 500e6, 100.0, 0.001)],
        ),
        runs=runs,
    )


def full_campaign() -> CampaignRun:
    res = scenario(
        "res-4", pacing="per-nic", pacing_rate_bps=480e6, size_bytes=1 << 30, verify="receipt"
    )
    ipf = scenario(
        "iperf3-4", tool="iperf3", pacing="per-nic", pacing_rate_bps=480e6, duration_s=10.0
    )
    failed = run(
        res,
        1,
        events=[
            Event(3.0, "link-down", "l1"),
            Event(3.4, "path-failed", "l1"),
            Event(6.0, "link-up", "l1"),
            Event(7.1, "cap", "s0 -> 120 segments"),
        ],
        failover=Failover(0.42, 1.3),
        verified=True,
    )
    failed.streams[0].mss_bytes = 1448
    failed.streams[0].samples[2].cap_segments = 120
    failed.streams[0].samples[3].retransmits = 7
    limited = failed.streams[0].samples[1]
    limited.busy, limited.rwnd_limited, limited.sndbuf_limited = 0.75, 0.125, 0.0
    errored = run(ipf, 1, error="iperf3: error - unable to connect", intervals=[], streams=[])
    return campaign([run(res, 0, verified=True, jain=0.99), failed, run(ipf, 0), errored])


# ------------------------------------------------------------------ round trip


def test_round_trip_is_exact() -> None:
    result = full_campaign()
    data = result.to_json()
    assert CampaignRun.from_json(data) == result
    text = result.dumps()
    assert CampaignRun.loads(text) == result
    assert CampaignRun.loads(text).dumps() == text
    assert json.loads(text)["version"] == 1


def test_save_and_load(tmp_path: Path) -> None:
    result = full_campaign()
    path = tmp_path / "run.json"
    result.save(path)
    assert CampaignRun.load(path) == result
    assert not path.with_name("run.json.tmp").exists()


def test_json_keys_match_the_schema() -> None:
    data = full_campaign().to_json()
    assert set(data) == {
        "version", "campaign", "run_id", "started", "finished", "machine", "topology", "runs",
    }  # fmt: skip
    assert set(data["machine"]) == {"cores", "kernel", "cc_available"}
    assert set(data["topology"]) == {"kind", "spec", "bottleneck_bps", "paths"}
    assert set(data["topology"]["paths"][0]) == {"name", "rate_bps", "rtt_ms", "loss"}
    r = data["runs"][1]
    assert set(r) == {
        "scenario", "repetition", "started", "seconds", "bytes", "goodput_bps", "cpu_seconds",
        "verified", "error", "intervals", "streams", "events", "failover", "jain", "lab_late",
    }  # fmt: skip
    assert set(r["scenario"]) == {
        "name", "tool", "streams", "pacing", "pacing_rate_bps", "equalizer", "multilink", "cc",
        "size_bytes", "duration_s", "loss", "verify",
    }  # fmt: skip
    assert set(r["streams"][0]) == {"id", "path", "mss_bytes", "samples"}
    assert set(r["streams"][0]["samples"][0]) == {
        "t", "bps", "cwnd_bytes", "rtt_us", "retransmits", "cap_segments", "busy",
        "rwnd_limited", "sndbuf_limited",
    }  # fmt: skip
    assert r["events"][0] == {"t": 3.0, "kind": "link-down", "detail": "l1"}
    assert r["failover"] == {"lost_seconds": 0.42, "back_after_s": 1.3}


def test_integers_in_float_fields_load_as_floats() -> None:
    data = full_campaign().to_json()
    data["runs"][0]["goodput_bps"] = 900000000
    loaded = CampaignRun.from_json(data)
    assert loaded.runs[0].goodput_bps == 900e6
    assert isinstance(loaded.runs[0].goodput_bps, float)


def test_optional_fields_may_be_left_out() -> None:
    data = full_campaign().to_json()
    del data["version"]
    del data["runs"][0]["failover"]
    del data["runs"][0]["scenario"]["loss"]
    del data["runs"][0]["streams"][0]["samples"][0]["cap_segments"]
    for key in ("busy", "rwnd_limited", "sndbuf_limited"):  # results written before them
        del data["runs"][0]["streams"][0]["samples"][1][key]
    del data["runs"][2]["scenario"]["loss"]  # same scenario name as runs[3]: keep them equal
    del data["runs"][3]["scenario"]["loss"]
    del data["runs"][1]["lab_late"]  # results written before it
    loaded = CampaignRun.from_json(data)
    assert loaded.runs[0].failover is None and loaded.runs[1].lab_late is None


def test_the_runs_a_delay_line_released_frames_late_in_are_named_after_the_table() -> None:
    result = full_campaign()
    assert format_lab_late(result.runs) is None
    assert format_results(result) == format_summary(summary_rows(result))
    result.runs[0].lab_late = LabLateness(0, 0.0)  # asked, nothing late
    result.runs[1].lab_late = LabLateness(17, 299.3)
    again = CampaignRun.from_json(result.to_json())
    assert again.runs[1].lab_late == LabLateness(17, 299.3)
    line = format_results(again).splitlines()[-1]
    name = result.runs[1].scenario.name
    assert line == (
        f"lab: the delay lines released frames late during 1 run: {name} "
        f"(run {result.runs[1].repetition}): 17 frames, up to 299 ms"
    )


def test_results_from_before_the_verification_mode_load_without_it() -> None:
    data = full_campaign().to_json()
    assert data["runs"][0]["scenario"]["verify"] == "receipt"
    for r in data["runs"]:
        del r["scenario"]["verify"]
    assert {r.scenario.verify for r in CampaignRun.from_json(data).runs} == {None}


# ------------------------------------------------------------------ validation


def _mutate(path: str, value: Any) -> dict[str, Any]:
    """The campaign's JSON with ``value`` at ``path`` (``a.b[1].c``; DELETE removes)."""
    data = full_campaign().to_json()
    parts = path.replace("[", ".").replace("]", "").split(".")
    node: Any = data
    for p in parts[:-1]:
        node = node[int(p)] if p.isdigit() else node[p]
    last = parts[-1]
    key: Any = int(last) if last.isdigit() else last
    if value is DELETE:
        del node[key]
    else:
        node[key] = value
    return data


DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("campaign", 3, "campaign: expected a string"),
        ("run_id", DELETE, "run_id: missing"),
        ("started", "yesterday", "started: expected a number"),
        ("finished", 1.0, "finished: is before started"),
        ("version", 2, "version: unsupported"),
        ("machine.cores", 0, "machine.cores: must be >= 1"),
        ("machine.cores", True, "machine.cores: expected an integer"),
        ("machine.cc_available[1]", None, "machine.cc_available[1]: expected a string"),
        ("topology.kind", "cloud", "topology.kind: 'cloud' is not one of lab, loopback, real"),
        ("topology.bottleneck_bps", 0, "topology.bottleneck_bps: must be > 0"),
        ("topology.paths[1].loss", 1.5, "topology.paths[1].loss: must be <= 1"),
        ("runs", {}, "runs: expected a list"),
        ("runs[1]", [], "runs[1]: expected an object"),
        ("runs[1].scenario.tool", "scp", "runs[1].scenario.tool: 'scp' is not one of"),
        ("runs[1].scenario.streams", 0, "runs[1].scenario.streams: must be >= 1"),
        ("runs[1].scenario.pacing", "on", "runs[1].scenario.pacing: 'on' is not one of"),
        ("runs[1].scenario.multilink", "bond", "runs[1].scenario.multilink: 'bond'"),
        ("runs[1].scenario.equalizer", "yes", "runs[1].scenario.equalizer: expected true"),
        ("runs[1].scenario.verify", "hash", "runs[1].scenario.verify: 'hash' is not one of"),
        ("runs[1].scenario.name", DELETE, "runs[1].scenario.name: missing"),
        ("runs[1].scenario.cc", "bbr", "runs[1].scenario: differs from runs[0].scenario"),
        ("runs[1].bytes", -1, "runs[1].bytes: must be >= 0"),
        ("runs[1].bytes", 1.5, "runs[1].bytes: expected an integer"),
        ("runs[1].goodput_bps", None, "runs[1].goodput_bps: must not be null"),
        ("runs[1].verified", 1, "runs[1].verified: expected true, false or null"),
        ("runs[1].jain", 1.5, "runs[1].jain: must be <= 1"),
        ("runs[1].intervals[2].bps", "fast", "runs[1].intervals[2].bps: expected a number"),
        ("runs[1].intervals[3].t", 0.5, "runs[1].intervals[3].t: times must not decrease"),
        ("runs[1].streams[1].id", "s0", "runs[1].streams[1].id: duplicate stream id 's0'"),
        ("runs[1].streams[0].samples[4].cwnd_bytes", -5, "samples[4].cwnd_bytes: must be >= 0"),
        ("runs[1].streams[0].samples[2].cap_segments", 0, "samples[2].cap_segments: must be >= 1"),
        ("runs[1].streams[0].samples[0].extra", 1, "samples[0].extra: unknown field"),
        ("runs[1].streams[0].samples[1].busy", 1.5, "samples[1].busy: must be <= 1"),
        ("runs[1].streams[0].samples[1].rwnd_limited", -0.1, "rwnd_limited: must be >= 0"),
        ("runs[1].events[0].kind", "explosion", "runs[1].events[0].kind: 'explosion' is not"),
        ("runs[1].failover.lost_seconds", -1, "runs[1].failover.lost_seconds: must be >= 0"),
        ("runs[1].failover", 3, "runs[1].failover: expected an object"),
    ],
)
def test_validation_names_the_field(path: str, value: Any, message: str) -> None:
    with pytest.raises(ResultsError) as info:
        CampaignRun.from_json(_mutate(path, value))
    assert message in str(info.value)


def test_non_finite_numbers_are_refused() -> None:
    data = _mutate("runs[0].cpu_seconds", math.nan)
    with pytest.raises(ResultsError, match=r"runs\[0\]\.cpu_seconds: must be finite"):
        CampaignRun.from_json(data)


def test_loads_reports_bad_json_and_load_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="not JSON"):
        CampaignRun.loads("{")
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_mutate("runs[0].repetition", "first")))
    with pytest.raises(ResultsError, match=r"bad\.json: runs\[0\]\.repetition: expected an int"):
        CampaignRun.load(path)
    with pytest.raises(ResultsError, match=r"missing\.json"):
        CampaignRun.load(tmp_path / "missing.json")


def test_top_level_must_be_an_object() -> None:
    with pytest.raises(ResultsError, match="results: expected an object"):
        CampaignRun.from_json([])


# ------------------------------------------------------------------ figures


def test_jain_is_the_equalizers() -> None:
    assert jain([5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain([3.0, 1.0]) == pytest.approx(16 / 20)
    assert jain([]) == 1.0


def test_window_means_weight_samples_by_overlap() -> None:
    # 10 s run; the window is [2, 8]. s0: 100 until t=5, then 300 -> mean 200 in the window.
    # s1: one sample covering (0, 10] at 50. s2: only samples outside the window.
    sc = scenario("w", streams=3)
    r = run(sc, seconds=10.0)
    r.streams[0].samples = [Sample(float(t), 100.0 if t <= 5 else 300.0) for t in range(1, 11)]
    r.streams[1].samples = [Sample(10.0, 50.0)]
    r.streams[2].samples = [Sample(1.0, 999.0), Sample(1.5, 999.0)]
    means = window_means(r)
    assert means["s0"] == pytest.approx(200.0)
    assert means["s1"] == pytest.approx(50.0)
    assert means["s2"] == 0.0
    # a window that ends inside a sample counts only the overlapping part
    r.streams[0].samples = [Sample(4.0, 100.0), Sample(10.0, 400.0)]
    assert window_means(r, 0.3, 0.6)["s0"] == pytest.approx((100 * 1 + 400 * 2) / 3)


def test_window_means_use_the_samples_when_seconds_is_unknown() -> None:
    sc = scenario("w", streams=1)
    r = run(sc, seconds=10.0)
    r.seconds = 0.0
    r.streams[0].samples = [Sample(1.0, 10.0), Sample(5.0, 20.0), Sample(10.0, 30.0)]
    # window [2, 8]: (2, 5] at 20, (5, 8] at 30
    assert window_means(r)["s0"] == pytest.approx(25.0)
    with pytest.raises(ValueError, match="empty"):
        window_means(r, 0.5, 0.5)


def test_run_jain_over_the_middle_of_the_run() -> None:
    sc = scenario("j", streams=2)
    r = run(sc, rates=[300.0, 100.0])
    assert run_jain(r) == pytest.approx(16 / 20)
    # unequal only at the edges (first and last 20%): fair in the middle
    for st in r.streams:
        st.samples = [Sample(float(t), 200.0 if 2 < t <= 8 else 0.0) for t in range(1, 11)]
    r.streams[0].samples[0].bps = 1e9
    assert run_jain(r) == pytest.approx(1.0)
    assert run_jain(run(sc, streams=[])) is None


# ------------------------------------------------------------------ summary


def test_summary_pairs_reservoir_with_the_iperf3_baseline_paced_at_its_rate() -> None:
    """With a pacing rate axis, each reservoir scenario is set against the iperf3 run
    paced at the same rate (as the campaign pairs them), not the first of them."""
    slow, fast = 950e6, 990e6
    res = [
        scenario(f"res-{r:g}", streams=16, pacing="per-nic", pacing_rate_bps=r)
        for r in (slow, fast)
    ]
    ipf = [
        scenario(f"ipf-{r:g}", tool="iperf3", streams=16, pacing="per-nic", pacing_rate_bps=r)
        for r in (slow, fast)
    ]
    runs = [run(ipf[0], goodput=850e6), run(ipf[1], goodput=880e6)]
    runs += [run(res[0], goodput=780e6), run(res[1], goodput=880e6)]
    rows = {row.scenario: row for row in summary_rows(campaign(runs))}
    assert rows["res-9.5e+08"].baseline == "ipf-9.5e+08"
    assert rows["res-9.9e+08"].baseline == "ipf-9.9e+08"
    assert rows["res-9.9e+08"].of_iperf3 == pytest.approx(1.0)


def test_summary_pairs_reservoir_with_its_iperf3_baseline() -> None:
    res = scenario("res-8", streams=8, pacing="per-nic")
    res_other_cc = scenario("res-8-bbr", streams=8, pacing="per-nic", cc="bbr")
    res_loss = scenario("res-8-loss", streams=8, pacing="per-nic", loss=0.01)
    ipf = scenario("ipf-8", tool="iperf3", streams=8, pacing="per-nic")
    ipf_unpaced = scenario("ipf-8-off", tool="iperf3", streams=8, pacing="off")
    ipf_loss = scenario("ipf-8-loss", tool="iperf3", streams=8, pacing="per-nic", loss=0.01)
    runs = [
        run(ipf_unpaced, goodput=500e6),
        run(res, 0, goodput=960e6, jain=0.99, cpu_seconds=3.0, bytes=2_000_000_000),
        run(res, 1, goodput=980e6, jain=0.97, cpu_seconds=5.0, bytes=2_000_000_000),
        run(res, 2, goodput=1.0, error="boom", jain=0.1),
        run(ipf, 0, goodput=900e6),
        run(ipf, 1, goodput=980e6),
        run(res_other_cc, goodput=800e6),
        run(res_loss, goodput=450e6),
        run(ipf_loss, goodput=500e6),
    ]
    rows = {row.scenario: row for row in summary_rows(campaign(runs))}
    assert list(rows) == ["ipf-8-off", "res-8", "ipf-8", "res-8-bbr", "res-8-loss", "ipf-8-loss"]
    row = rows["res-8"]
    assert (row.repetitions, row.errors) == (3, 1)
    assert row.goodput_bps == pytest.approx(970e6)  # median of the two that did not fail
    assert row.of_bottleneck == pytest.approx(0.97)
    assert row.baseline == "ipf-8"
    assert row.of_iperf3 == pytest.approx(970 / 940)
    assert row.jain == pytest.approx(0.98)
    assert row.cpu_s_per_gb == pytest.approx(2.0)
    assert row.failover_lost_s is None
    assert {k: c.met for k, c in row.checks.items()} == {
        "of_bottleneck": True,
        "of_iperf3": True,
        "jain": True,
    }
    assert rows["res-8-bbr"].baseline is None
    assert rows["res-8-bbr"].of_iperf3 is None
    assert rows["res-8-loss"].baseline == "ipf-8-loss"
    assert rows["res-8-loss"].of_iperf3 == pytest.approx(0.9)
    assert rows["res-8-loss"].checks["of_iperf3"].met is False
    assert rows["res-8-loss"].checks["of_bottleneck"].met is False
    # the baselines themselves have no targets
    assert rows["ipf-8"].checks == {}
    assert rows["ipf-8"].of_iperf3 is None
    assert rows["ipf-8"].of_bottleneck == pytest.approx(0.94)


def test_summary_failover_and_equalizer_off() -> None:
    res = scenario("cut", streams=4, equalizer=False)
    runs = [
        run(res, 0, failover=Failover(0.8, 1.5), jain=0.5),
        run(res, 1, failover=Failover(1.4, None), jain=0.5),
        run(res, 2, failover=Failover(0.6, 3.0), jain=0.5),
    ]
    (row,) = summary_rows(campaign(runs))
    assert row.failover_lost_s == pytest.approx(0.8)
    assert row.back_after_s == pytest.approx(2.25)  # median of the two that came back
    assert row.checks["failover_lost_s"].met is True
    assert row.checks["back_after_s"].met is False
    assert "jain" not in row.checks  # only a target with the equalizer on


def test_summary_on_loopback_compares_with_iperf3_only() -> None:
    res = scenario("lo-res", streams=4, equalizer=None)
    ipf = scenario("lo-ipf", tool="iperf3", streams=4)
    rows = summary_rows(
        campaign([run(res, goodput=8.5e9), run(ipf, goodput=10e9)], "loopback", None)
    )
    row = rows[0]
    assert row.of_bottleneck is None
    assert row.of_iperf3 == pytest.approx(0.85)
    assert row.checks["of_iperf3"].target == ">= 0.8"
    assert row.checks["of_iperf3"].met is True
    assert set(row.checks) == {"of_iperf3"}


def peer(name: str, tool: str, streams: int = 8, **kw: Any) -> Scenario:
    return scenario(name, tool=tool, streams=streams, size_bytes=1 << 30, **kw)


def test_summary_compares_reservoir_with_the_best_peer_of_the_same_streams() -> None:
    res = scenario("res-8", streams=8, pacing="per-nic", size_bytes=1 << 30)
    res_16 = scenario("res-16", streams=16, pacing="per-nic", size_bytes=1 << 30)
    ipf = scenario("ipf-8", tool="iperf3", streams=8, pacing="per-nic", duration_s=10.0)
    runs = [
        run(res, goodput=920e6),
        run(ipf, goodput=940e6),
        run(peer("gftp-8", "gridftp", pacing="per-nic"), goodput=700e6),
        run(peer("gftp-8-off", "gridftp", pacing="off"), goodput=760e6),  # best: any pacing
        run(peer("xrd-8", "xrdcp", pacing="per-nic"), goodput=720e6),
        run(peer("xrd-8", "xrdcp", pacing="per-nic"), 1, goodput=2e9, error="differs"),
        run(peer("xrd-16", "xrdcp", streams=16, pacing="per-nic"), goodput=900e6),
        run(res_16, goodput=960e6),
    ]
    rows = {row.scenario: row for row in summary_rows(campaign(runs))}
    row = rows["res-8"]
    assert row.peer == "gftp-8-off" and row.of_peers == pytest.approx(920 / 760)
    assert row.checks["of_peers"].target == ">= 1.15" and row.checks["of_peers"].met
    assert rows["res-16"].peer == "xrd-16"
    assert rows["res-16"].of_peers == pytest.approx(960 / 900)
    assert rows["res-16"].checks["of_peers"].met is False
    # the peers' own rows: their goodput against iperf3, no targets, no peer of their own
    gftp = rows["gftp-8"]
    assert gftp.baseline == "ipf-8" and gftp.of_iperf3 == pytest.approx(700 / 940)
    assert (gftp.peer, gftp.of_peers, gftp.checks) == (None, None, {})
    assert rows["xrd-8"].goodput_bps == pytest.approx(720e6)  # the copy that differed: no figure
    text = format_summary(list(rows.values()))
    assert "1.211 +" in next(ln for ln in text.splitlines() if ln.startswith("res-8 "))
    assert "1.067 *" in next(ln for ln in text.splitlines() if ln.startswith("res-16 "))
    assert "1.15 of the best of gridftp and xrdcp" in text.splitlines()[-1]


def test_summary_on_loopback_wants_reservoir_1_3_times_the_best_peer() -> None:
    res = scenario("lo-res", streams=4, equalizer=None, size_bytes=1 << 30)
    runs = [run(res, goodput=8e9), run(peer("lo-gftp", "gridftp", streams=4), goodput=7e9)]
    (row, _) = summary_rows(campaign(runs, "loopback", None))
    assert row.of_peers == pytest.approx(8 / 7)
    assert (row.checks["of_peers"].target, row.checks["of_peers"].met) == (">= 1.3", False)


def test_peer_runs_round_trip_through_json() -> None:
    r = run(peer("xrd-32", "xrdcp", streams=32), verified=True, streams=[])
    r.events = [Event(0.0, "note", "xrdcp: 32 streams asked, 15 used")]
    result = campaign([r])
    assert CampaignRun.loads(result.dumps()) == result


def test_the_end_of_a_copy_with_nothing_left_to_send_is_not_counted_idle() -> None:
    """The seconds after the last data (the whole-destination check, the flush) have
    idle streams by design: the shares are those of the seconds that carried data."""
    sc = scenario("res-2", streams=2)
    r = run(sc, seconds=4)
    for st in r.streams:
        for sample in st.samples:
            sample.busy = 0.98
        st.samples += [Sample(5.0, 12_000.0, busy=0.1), Sample(6.0, 0.0, busy=0.0)]
    assert len(data_samples(r)) == 8
    (row,) = summary_rows(campaign([r]))
    assert row.idle == pytest.approx(0.02)
    r.goodput_bps = 0.0  # nothing to say what "moving" is: every sample counts
    assert stream_limits(r)[0] == pytest.approx((0.02 * 8 + 0.9 * 2 + 1.0 * 2) / 12)


def test_summary_of_a_scenario_that_always_failed() -> None:
    sc = scenario("broken")
    (row,) = summary_rows(campaign([run(sc, error="x"), run(sc, 1, error="y")]))
    assert (row.repetitions, row.errors) == (2, 2)
    assert row.goodput_bps is None
    assert row.jain is None
    assert row.cpu_s_per_gb is None
    assert row.checks == {}


def test_summary_says_what_held_the_streams_back() -> None:
    sc = scenario("res-2", streams=2)
    r = run(sc, seconds=4)
    for st, (busy, rwnd) in zip(r.streams, [(1.0, 0.5), (0.5, 0.0)], strict=True):
        for sample in st.samples:
            sample.busy, sample.rwnd_limited, sample.sndbuf_limited = busy, rwnd, 0.0
    r.streams[1].samples[0].busy = None  # a sample that does not say counts for nothing
    (row,) = summary_rows(campaign([r]))
    assert row.idle == pytest.approx((0 * 4 + 0.5 * 3) / 7)
    assert (row.rwnd_limited, row.sndbuf_limited) == (0.25, 0.0)
    assert stream_limits(run(sc)) == (None, None, None)  # iperf3's, or older results
    line = format_summary([row]).splitlines()[2]
    assert line.split()[-3:] == ["21%", "25%", "0%"]


def test_format_summary_columns() -> None:
    rows = summary_rows(full_campaign())
    text = format_summary(rows)
    lines = text.splitlines()
    header = lines[0].split()
    assert header[:4] == ["scenario", "tool", "streams", "reps"]
    columns = ("Mbit/s", "/bottleneck", "/iperf3", "/best-peer", "Jain", "lost", "back", "CPU")
    for column in columns:
        assert column in header
    assert set(lines[1]) <= {"-", " "}
    res_line = next(ln for ln in lines if ln.startswith("res-4"))
    assert "900.0" in res_line  # goodput Mbit/s
    assert "0.900 +" in res_line  # of the bottleneck: met, just (>= 0.9)
    assert "1.000 +" in res_line  # of iperf3: met
    assert "0.42 +" in res_line  # failover lost seconds: met
    assert "1.30 +" in res_line  # back after
    ipf_line = next(ln for ln in lines if ln.startswith("iperf3-4"))
    assert "2 (1 err)" in ipf_line
    assert "+" not in ipf_line
    assert "*" not in ipf_line
    assert "design.md section 6" in lines[-1]
    # the figure columns line up: every data line as long as the header (trailing "-")
    assert all(len(ln) <= len(lines[1]) for ln in lines[:-1])
