"""The campaign report: index.html and SVG plots from a synthetic campaign run."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from reservoir.campaigns import _svg as svg
from reservoir.campaigns.report import report_main, write_report
from reservoir.campaigns.results import (
    CampaignRun,
    Event,
    Failover,
    Interval,
    Machine,
    PathInfo,
    Run,
    Sample,
    Scenario,
    Stream,
    Topology,
    run_jain,
)

SVG_NS = "{http://www.w3.org/2000/svg}"


# ------------------------------------------------------------------ fixture builder


def make_run(
    sc: Scenario,
    rep: int,
    *,
    goodput: float,
    seconds: int = 20,
    cut: tuple[float, float] | None = None,
    caps: bool = False,
    error: str | None = None,
) -> Run:
    """A run of ``sc``: each stream's share of ``goodput`` wobbles once a second; with
    ``cut=(down, up)`` the streams on l1 carry nothing between link-down and link-up."""
    if error is not None:
        return Run(sc, rep, 1.7e9 + rep, 0.5, 0, 0.0, 0.1, error=error)
    shape = _Shape(sc.streams, goodput, seconds, cut, caps)
    streams = [_stream(k, shape) for k in range(sc.streams)]
    intervals = [
        Interval(float(t), sum(st.samples[t - 1].bps for st in streams))
        for t in range(1, seconds + 1)
    ]
    r = Run(
        sc,
        rep,
        started=1.7e9 + rep * 60,
        seconds=float(seconds),
        bytes=int(goodput * seconds / 8),
        goodput_bps=goodput,
        cpu_seconds=1.5 + 0.1 * rep,
        verified=True if sc.tool == "reservoir" else None,
        intervals=intervals,
        streams=streams,
        events=_events(cut, caps),
        failover=Failover(0.55, 1.2) if cut else None,
    )
    r.jain = run_jain(r)
    return r


@dataclass(frozen=True)
class _Shape:
    """What every stream of a made-up run shares."""

    streams: int
    goodput: float
    seconds: int
    cut: tuple[float, float] | None
    caps: bool


def _stream(k: int, shape: _Shape) -> Stream:
    """Stream ``k``, on l1 (even) or l2 (odd), one sample a second."""
    path = "l1" if k % 2 == 0 else "l2"
    samples = [_sample(k, t, path, shape) for t in range(1, shape.seconds + 1)]
    return Stream(f"s{k}", path, samples, mss_bytes=1448 if shape.caps else None)


def _sample(k: int, t: int, path: str, shape: _Shape) -> Sample:
    fair = shape.goodput / shape.streams
    share = fair * (1 + 0.15 * math.sin(k * 1.3 + t * 0.7))
    if shape.cut and shape.cut[0] < t <= shape.cut[1]:
        share = 0.0 if path == "l1" else share * 1.6  # l1 down, l2 carries more
    cwnd = int(share * 0.1 / 8) + 14480  # about one BDP at 100 ms
    segments = fair * 0.1 / 8 / 1448
    cap = None
    if shape.caps and t > 3:
        cap = int(segments * (1.05 + 0.05 * ((t // 4 + k) % 3))) + 1
    return Sample(
        float(t),
        share,
        cwnd_bytes=cwnd,
        rtt_us=100_000 + 50 * k,
        retransmits=(t + k) % 3,
        cap_segments=cap,
    )


def _events(cut: tuple[float, float] | None, caps: bool) -> list[Event]:
    events = []
    if cut:
        events = [
            Event(cut[0], "link-down", "l1"),
            Event(cut[0] + 0.3, "path-failed", "l1"),
            Event(cut[1], "link-up", "l1"),
            Event(cut[1] + 0.8, "path-recovered", "l1"),
        ]
    if caps:
        events.append(Event(4.0, "cap", "s0 -> 80 segments"))
    return events


def make_campaign(name: str = "lfn-2x500m", runs: list[Run] | None = None) -> CampaignRun:
    res8 = Scenario(name, "reservoir", 8, "per-nic", 60e6, True, "paths", "cubic", 1 << 30)
    res4 = Scenario("res-4", "reservoir", 4, "per-nic", 120e6, True, "paths", "cubic", 1 << 30)
    ipf8 = Scenario("iperf3-8", "iperf3", 8, "per-nic", 60e6, None, "paths", "cubic", None, 20.0)
    cut = Scenario("res-8-cut", "reservoir", 8, "per-nic", 60e6, True, "paths", "cubic", 1 << 30)
    if runs is None:
        runs = [
            make_run(res8, 0, goodput=955e6, caps=True),
            make_run(res8, 1, goodput=948e6, caps=True),
            make_run(res4, 0, goodput=880e6),
            make_run(res4, 1, goodput=890e6),
            make_run(ipf8, 0, goodput=940e6),
            make_run(ipf8, 1, goodput=0.0, error="iperf3: error - unable to connect <to> server"),
            make_run(cut, 0, goodput=870e6, cut=(8.0, 14.0)),
        ]
    return CampaignRun(
        campaign="lfn-2x500m <nightly>",
        run_id="20240101T120000",
        started=1.7e9,
        finished=1.7e9 + 600,
        machine=Machine(2, "6.18.0", ["bbr", "cubic"]),
        topology=Topology(
            "lab",
            "config/lab/lfn-2x500m-100ms.toml",
            1e9,
            [PathInfo("l1", 500e6, 100.0, 0.0), PathInfo("l2", 500e6, 100.0, 0.0)],
        ),
        runs=runs,
    )


def svgs(out: Path) -> dict[str, ET.Element]:
    return {p.name: ET.parse(p).getroot() for p in sorted(out.glob("*.svg"))}


# ------------------------------------------------------------------ report


def test_report_writes_index_and_plots(tmp_path: Path) -> None:
    result = make_campaign()
    index = write_report(result, tmp_path / "report")
    assert index == tmp_path / "report" / "index.html"
    page = index.read_text()
    plots = svgs(index.parent)
    for name in ("goodput-vs-streams.svg", "jain.svg", "cpu.svg"):
        assert name in plots
    # every run that did not fail has its throughput plot; the caps runs their cwnd plot;
    # the cut run its failover plot; the failed run none
    for i in (0, 1, 2, 3, 4, 6):
        assert f"run{i:03d}-throughput.svg" in plots
    assert "run000-cwnd.svg" in plots
    assert "run006-failover.svg" in plots
    assert not any(name.startswith("run005") for name in plots)
    for name, root in plots.items():
        assert root.tag == f"{SVG_NS}svg", name
        assert root.find(f"{SVG_NS}title") is not None
    # every image the page references exists, relatively
    refs = re.findall(r"<img src='([^']+)'", page)
    assert sorted(refs) == sorted(plots)
    assert page.startswith("<!DOCTYPE html>")
    assert "<style>" in page
    assert "<script" not in page


def test_report_shows_the_summary_figures_and_targets(tmp_path: Path) -> None:
    page = write_report(make_campaign("res-8"), tmp_path).read_text()
    # res-8: median goodput 951.5 Mbit/s = 0.952 of 1 Gbit/s, 1.012 of iperf3-8 (940)
    assert "951.5" in page
    assert "0.952" in page
    assert "1.012" in page
    assert "&ge; 0.9 &#10003;" in page
    # res-4 (880, 890 -> 885) misses 0.9 of the bottleneck; it has no iperf3 pair
    row = next(ln for ln in page.splitlines() if "<td class='name'>res-4</td>" in ln)
    assert "class='missed'>0.885" in row
    # failover: lost seconds and back after, both within target
    cut = next(ln for ln in page.splitlines() if "<td class='name'>res-8-cut</td>" in ln)
    assert "class='met'>0.55" in cut
    assert "class='met'>1.20" in cut
    # header
    assert "lfn-2x500m &lt;nightly&gt;" in page
    assert "kernel 6.18.0" in page
    assert "1 Gbit/s" in page
    # the failed run shows its error, escaped, instead of plots
    assert "<pre class='error'>iperf3: error - unable to connect &lt;to&gt; server</pre>" in page


def peer_run(name: str, tool: str, goodput: float, notes: list[str]) -> Run:
    sc = Scenario(name, tool, 8, "per-nic", None, None, "paths", "cubic", 1 << 30)  # type: ignore[arg-type]
    r = make_run(sc, 0, goodput=goodput)
    r.streams, r.jain, r.verified = [], None, True
    r.events = [Event(0.0, "note", n) for n in notes]
    return r


def test_report_compares_reservoir_with_the_best_peer_and_shows_the_peers_notes(
    tmp_path: Path,
) -> None:
    res8 = Scenario("res-8", "reservoir", 8, "per-nic", None, True, "paths", "cubic", 1 << 30)
    runs = [
        make_run(res8, 0, goodput=950e6),
        peer_run("gridftp-8", "gridftp", 720e6, ["CPU: client 1.10 s, server 0.90 s"]),
        peer_run("xrdcp-8", "xrdcp", 760e6, ["xrdcp: 20 streams asked, 15 used"]),
    ]
    page = write_report(make_campaign(runs=runs), tmp_path).read_text()
    row = next(ln for ln in page.splitlines() if "<td class='name'>res-8</td>" in ln)
    assert "<td class='met' title='vs xrdcp-8'>1.250 <span class='target'>&ge; 1.15" in row
    assert "&ge; 1.15 of the best peer" in page
    assert "<p class='note'>xrdcp: 20 streams asked, 15 used</p>" in page
    assert "CPU: client 1.10 s, server 0.90 s" in page
    goodput = (tmp_path / "goodput-vs-streams.svg").read_text()
    assert goodput.count("stroke-dasharray='2 3'") >= 2  # the peers, dotted
    assert "gridftp" in (tmp_path / "cpu.svg").read_text()


def test_the_goodput_plot_draws_each_verification_mode_as_its_own_family(
    tmp_path: Path,
) -> None:
    args = ("reservoir", 8, "off", None, False, "paths", "bbr", 1 << 30)
    storage = Scenario("res-8-storage", *args, verify="storage")  # type: ignore[arg-type]
    receipt = Scenario("res-8-receipt", *args, verify="receipt")  # type: ignore[arg-type]
    runs = [make_run(storage, 0, goodput=700e6), make_run(receipt, 0, goodput=800e6)]
    write_report(make_campaign(runs=runs), tmp_path)
    goodput = (tmp_path / "goodput-vs-streams.svg").read_text()
    assert "pacing off · eq off · verify receipt" in goodput  # cut short after
    assert "pacing off · eq off · paths · bbr" in goodput


def test_text_is_escaped(tmp_path: Path) -> None:
    evil = "<script>alert('x')</script>"
    out = tmp_path / "r"
    page = write_report(make_campaign(evil), out).read_text()
    assert "<script" not in page
    assert "&lt;script&gt;" in page
    for p in out.glob("*.svg"):
        text = p.read_text()
        assert "<script" not in text, p.name
        ET.fromstring(text)  # still well-formed
    assert "&lt;script&gt;" in (out / "jain.svg").read_text()


def test_report_renders_64_streams(tmp_path: Path) -> None:
    sc = Scenario("wide-64", "reservoir", 64, "per-socket", 15e6, True, "paths", "bbr", 4 << 30)
    result = make_campaign(runs=[make_run(sc, 0, goodput=960e6, seconds=30, caps=True)])
    out = tmp_path / "wide"
    write_report(result, out)
    root = ET.parse(out / "run000-throughput.svg").getroot()
    paths = root.findall(f"{SVG_NS}path")
    thin = [p for p in paths if p.get("stroke-width") == "0.9"]
    bold = [p for p in paths if float(p.get("stroke-width", "0")) > 2]
    assert len(thin) == 64
    assert len(bold) == 1  # the aggregate
    texts = [t.text or "" for t in root.iter(f"{SVG_NS}text")]
    assert "64 streams (thin lines)" in texts
    assert "s63 (l2)" not in texts  # no legend entry per stream at 64
    cwnd = ET.parse(out / "run000-cwnd.svg").getroot()
    steps = [p for p in cwnd.findall(f"{SVG_NS}path") if p.get("stroke-dasharray") == "4 2"]
    assert len(steps) == 64  # a cap step line per stream, on the cwnd scale (mss known)


def test_caps_without_mss_get_their_own_plot(tmp_path: Path) -> None:
    result = make_campaign()
    for st in result.runs[0].streams:
        st.mss_bytes = None
    write_report(result, tmp_path)
    caps = ET.parse(tmp_path / "run000-caps.svg").getroot()
    assert any("segments" in (t.text or "") for t in caps.iter(f"{SVG_NS}text"))


def test_failover_plot_marks_events_and_shades_the_lost_seconds(tmp_path: Path) -> None:
    write_report(make_campaign(), tmp_path)
    root = ET.parse(tmp_path / "run006-failover.svg").getroot()
    texts = [t.text or "" for t in root.iter(f"{SVG_NS}text")]
    assert "link-down l1" in texts
    assert "link-up l1" in texts
    assert "lost 0.55 s" in texts
    assert "back +1.20 s" in texts
    assert "path l1" in texts  # per-path lines beside the aggregate
    shaded = [r for r in root.findall(f"{SVG_NS}rect") if r.get("fill-opacity")]
    assert len(shaded) == 1


def test_report_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.json"
    make_campaign("res-8").save(path)
    assert report_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "run-report" / "index.html").exists()
    assert f"report: {tmp_path / 'run-report' / 'index.html'}" in out
    assert out.splitlines()[0].split()[:4] == ["scenario", "tool", "streams", "reps"]
    assert report_main([str(path), "--out", str(tmp_path / "elsewhere")]) == 0
    assert (tmp_path / "elsewhere" / "index.html").exists()


def test_report_main_refuses_bad_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"campaign": "x"}')
    assert report_main([str(path)]) == 2
    assert "run_id: missing" in capsys.readouterr().err
    assert not (tmp_path / "bad-report").exists()


# ------------------------------------------------------------------ svg


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (0.0, 1.0, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (0.0, 950.0, [0.0, 200.0, 400.0, 600.0, 800.0, 1000.0]),
        (0.0, 9.7, [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]),
        (3.0, 3.0, [2.6, 2.8, 3.0, 3.2, 3.4]),
    ],
)
def test_nice_ticks(lo: float, hi: float, expected: list[float]) -> None:
    assert svg.nice_ticks(lo, hi) == pytest.approx(expected)


def test_charts_parse_with_empty_and_gappy_data() -> None:
    empty = svg.line_chart([], title="nothing", x_label="x", y_label="y")
    ET.fromstring(empty)
    gappy = svg.Series("g", [0.0, 1.0, 2.0, 3.0], [1.0, None, 2.0, 2.5], step=True)
    root = ET.fromstring(svg.line_chart([gappy], title="t", x_label="x", y_label="y"))
    assert len(root.findall(f"{SVG_NS}path")) == 3  # axes + two pieces of the line
    bars = svg.bar_chart([svg.Bar("a", 0.5), svg.Bar("b", None)], title="b", x_label="v")
    texts = [t.text for t in ET.fromstring(bars).iter(f"{SVG_NS}text")]
    assert "n/a" in texts
    assert "0.5" in texts
