"""``make bench``'s closing block: the design.md section 6 figures over campaigns."""

from __future__ import annotations

from test_campaign_results import campaign, run, scenario

from reservoir.campaigns.bench import figures
from reservoir.campaigns.results import Failover


def line(lines: list[str], start: str) -> str:
    return next(x for x in lines if x.strip().startswith(start))


def test_lfn_figures_are_ratios_to_the_bottleneck_and_to_iperf3() -> None:
    res = scenario("res-8", streams=8, size_bytes=1 << 30)
    ipf = scenario("iperf3-8", tool="iperf3", streams=8, duration_s=10.0)
    lfn = campaign([run(res, goodput=880e6, jain=0.99), run(ipf, goodput=800e6)])
    lines = figures([lfn])
    assert line(lines, "LFN goodput / bottleneck").split()[4:] == ["0.880", "MISSED"]
    assert line(lines, "LFN goodput / iperf3").split()[4:] == ["1.100", "met"]
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


def test_reservoir_is_set_against_the_best_peer_beside_iperf3_with_every_tools_cpu() -> None:
    res = scenario("res-16", streams=16, size_bytes=1 << 30)
    ipf = scenario("iperf3-16", tool="iperf3", streams=16, duration_s=10.0)
    gftp = scenario("gridftp-16", tool="gridftp", streams=16, size_bytes=1 << 30)
    xrd = scenario("xrdcp-16", tool="xrdcp", streams=16, size_bytes=1 << 30)
    lfn = campaign(
        [
            run(res, goodput=900e6, cpu_seconds=4.5),
            run(ipf, goodput=940e6),
            run(gftp, goodput=725e6, cpu_seconds=9.0),
            run(xrd, goodput=760e6, cpu_seconds=6.0),
        ]
    )
    loop_res = scenario("lo-res", streams=8, equalizer=False, size_bytes=1 << 30)
    loop = campaign(
        [
            run(loop_res, goodput=7.5e9, cpu_seconds=6.0),
            run(scenario("lo-gftp", tool="gridftp", streams=8), goodput=7e9, cpu_seconds=9.0),
        ],
        kind="loopback",
        bottleneck=None,
    )
    lines = figures([lfn, loop])
    assert line(lines, "LFN goodput / best peer").split()[5:] == ["1.184", "met"]  # 900/760
    assert line(lines, "loopback copy / best peer").split()[5:] == ["1.071", "MISSED"]
    lfn_cpu = line(lines, "LFN CPU s/GB")  # cpu / (goodput x 10 s / 8 / 1e9)
    assert "reservoir 4.00;" in lfn_cpu and "gridftp 9.93;" in lfn_cpu
    assert "xrdcp 6.32" in lfn_cpu and "iperf3 2.13" in lfn_cpu
    assert "gridftp 1.03;" in line(lines, "loopback CPU") and "xrdcp -" in line(
        lines, "loopback CPU"
    )
    assert ">= 1.15 of the best of gridftp and xrdcp" in lines[-1]


def test_receipt_verified_runs_have_their_own_lines_and_loopback_target() -> None:
    """Storage verification is the default the main lines judge; receipt-verified runs
    follow under their own heading, on loopback against 1.6 of the best peer."""
    ipf = scenario("iperf3-16", tool="iperf3", streams=16, duration_s=10.0)
    lfn = campaign(
        [
            run(scenario("res-st", streams=16, size_bytes=1 << 30), goodput=760e6),
            run(
                scenario("res-rc", streams=16, size_bytes=1 << 30, verify="receipt"), goodput=830e6
            ),
            run(ipf, goodput=840e6),
        ]
    )
    gftp = scenario("lo-gftp", tool="gridftp", streams=8, size_bytes=1 << 30)
    loop = campaign(
        [
            run(scenario("lo-st", streams=8, equalizer=False, size_bytes=1 << 30), goodput=7e9),
            run(
                scenario("lo-rc", streams=8, equalizer=False, size_bytes=1 << 30, verify="receipt"),
                goodput=10.5e9,
            ),
            run(gftp, goodput=7e9),
        ],
        kind="loopback",
        bottleneck=None,
    )
    lines = figures([lfn, loop])
    receipt = lines[lines.index("  receipt-verified:") :]
    assert line(lines, "LFN goodput / iperf3").split()[4:] == ["0.905", "MISSED"]  # 760/840
    assert line(receipt, "LFN goodput / iperf3").split()[4:] == ["0.988", "MISSED"]  # 830/840
    assert line(lines, "loopback copy / best peer").split()[5:] == ["1.000", "MISSED"]
    assert line(receipt, "loopback copy / best peer").split()[5:] == ["1.500", "MISSED"]  # < 1.6
    assert "1.6 receipt-verified" in lines[-1]


def test_without_receipt_verified_runs_there_are_no_receipt_lines() -> None:
    res = scenario("res-8", streams=8, size_bytes=1 << 30)
    lines = figures([campaign([run(res, goodput=900e6)])])
    assert "  receipt-verified:" not in lines
