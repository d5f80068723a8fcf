"""``make bench``'s closing block: the design.md section 6 figures over campaigns."""

from __future__ import annotations

from test_campaign_results import campaign, run, scenario

from reservoir.lab.campaign._results import Failover
from reservoir.lab.campaign.bench import figures


def line(lines: list[str], start: str) -> str:
    return next(x for x in lines if x.strip().startswith(start))


def test_lfn_figures_are_ratios_to_the_bottleneck_and_to_iperf3() -> None:
    res = scenario("res-8", streams=8, size_bytes=1 << 30)
    ipf = scenario("iperf3-8", tool="iperf3", streams=8, duration_s=10.0)
    lfn = campaign([run(res, goodput=900e6, jain=0.99), run(ipf, goodput=800e6)])
    lines = figures([lfn])
    assert line(lines, "LFN goodput / bottleneck").split()[4:] == ["0.900", "MISSED"]
    assert line(lines, "LFN goodput / iperf3").split()[4:] == ["1.125", "met"]
    assert line(lines, "Jain").split()[-2:] == ["0.990", "met"]


def test_loopback_figures_compare_with_iperf3_and_report_cpu_per_gb() -> None:
    res = scenario("res-4", equalizer=False, size_bytes=1 << 30)
    ipf = scenario("iperf3-4", tool="iperf3", duration_s=10.0)
    loop = campaign(
        [run(res, goodput=6e9, cpu_seconds=15.0), run(ipf, goodput=10e9, cpu_seconds=5.0)],
        kind="loopback",
        bottleneck=None,
    )
    lines = figures([loop])
    assert line(lines, "loopback copy / iperf3").split()[4:] == ["0.600", "MISSED"]
    cpu = line(lines, "loopback CPU")
    assert "reservoir 2.00;" in cpu and "iperf3 0.40" in cpu  # 15 s / 7.5 GB, 5 s / 12.5 GB
    assert line(lines, "LFN goodput / bottleneck").split()[-1] == "-"


def test_failover_figures_are_the_medians_of_the_repetitions_against_the_target() -> None:
    res = scenario("res-16", streams=16, size_bytes=1 << 30)
    cut = campaign(
        [
            run(res, 0, failover=Failover(0.4, 1.0)),
            run(res, 1, failover=Failover(0.6, 3.0)),
        ]
    )
    lines = figures([cut])
    assert line(lines, "failover: aggregate").split()[-2:] == ["0.50", "met"]
    assert line(lines, "failover: path back").split()[-2:] == ["2.00", "MISSED"]
