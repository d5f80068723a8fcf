"""``make bench``: the quick subset of every shipped campaign, one after the other, and
the figures of design.md section 6 as ratios measured in the same run; ``make
bench-full`` (``--full``) the same over every campaign's whole matrix with its written
repetitions (about three and a half hours on the development machine).

    python -m reservoir.campaigns.bench [--full] [--out DIR] [--only NAME ...]

Each campaign's results go to ``DIR/NAME/`` (results.json, report.html, log.txt); the
end prints each campaign's summary table and then one block of section 6 figures:

- LFN goodput: reservoir's goodput / the bottleneck, / iperf3 and / the best of
  gridftp and xrdcp with the same streams in the same run, on every lab campaign
  (target >= 0.9, >= 1.0 and >= 1.15);
- fairness: Jain's index of reservoir runs with the equalizer on (target >= 0.98);
- loopback: reservoir / iperf3 (target >= 0.8), / the best of gridftp and xrdcp
  (target >= 1.3), and CPU seconds per GB of every tool (on the LFN too);
- failover: aggregate seconds lost while a path is down (< 1 s) and how soon the
  restored path carries traffic again (< 2 s);
- receipt-verified: the goodput lines again for the runs verified by the destination's
  receipts (the campaigns whose matrix has ``verify = ["storage", "receipt"]``); the
  lines above are storage-verified runs, the default (loopback target 1.6 here).

A benchmark, not a test: it exits 0 when every run completed, whether or not the
figures meet their targets, 1 when a run failed, 130/143 when interrupted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from reservoir.campaigns._spec import shipped
from reservoir.campaigns.results import (
    TARGET_BACK_S,
    TARGET_BOTTLENECK,
    TARGET_FAILOVER_S,
    TARGET_IPERF3,
    TARGET_IPERF3_LOOPBACK,
    TARGET_JAIN,
    TARGET_PEERS,
    TARGET_PEERS_LOOPBACK,
    TARGET_PEERS_LOOPBACK_RECEIPT,
    CampaignRun,
    SummaryRow,
    format_results,
    summary_rows,
)
from reservoir.campaigns.run.run_cli import run_main

__all__ = ["figures", "main"]

TOOLS = ("reservoir", "iperf3", "gridftp", "xrdcp")


def _span(values: Sequence[float], fmt: str = "{:.3f}") -> str:
    """``median (min-max, n)`` of the values; ``-`` without any."""
    if not values:
        return "-"
    med = fmt.format(statistics.median(values))
    if len(values) == 1:
        return med
    return f"{med} (min {fmt.format(min(values))}, max {fmt.format(max(values))}, n={len(values)})"


def _verdict(values: Sequence[float], ok: bool) -> str:
    return "" if not values else ("  met" if ok else "  MISSED")


def _cpu(rows: Sequence[SummaryRow]) -> str:
    """CPU seconds per GB of every tool: ``reservoir 0.61; iperf3 0.40; ...``."""
    parts = []
    for tool in TOOLS:
        values = [x.cpu_s_per_gb for x in rows if x.tool == tool and x.cpu_s_per_gb is not None]
        parts.append(f"{tool} {_span(values, '{:.2f}')}")
    return "; ".join(parts)


def figures(results: Sequence[CampaignRun]) -> list[str]:
    """The section 6 lines over every campaign's reservoir rows, storage-verified (the
    default) and, where campaigns ran it, receipt-verified; and every tool's CPU."""
    lfn_all: list[SummaryRow] = []
    loop_all: list[SummaryRow] = []
    for r in results:
        (loop_all if r.topology.kind == "loopback" else lfn_all).extend(summary_rows(r))
    lfn = [row for row in lfn_all if row.tool == "reservoir"]
    loop = [row for row in loop_all if row.tool == "reservoir"]
    jain = [x.jain for x in lfn if x.jain is not None and "jain" in x.checks]
    lost = [x.failover_lost_s for x in lfn if x.failover_lost_s is not None]
    back = [x.back_after_s for x in lfn if x.back_after_s is not None]
    receipt = [x for x in (*lfn, *loop) if x.verification == "receipt"]
    return [
        "design.md section 6, reservoir scenarios (median over scenarios):",
        *_goodput_lines(lfn, loop, "storage"),
        f"  Jain, equalizer on            {_span(jain)}"
        + _verdict(jain, min(jain, default=0) >= TARGET_JAIN),
        f"  loopback CPU s/GB             {_cpu(loop_all)}",
        f"  LFN CPU s/GB                  {_cpu(lfn_all)}",
        f"  failover: aggregate s lost    {_span(lost, '{:.2f}')}"
        + _verdict(lost, max(lost, default=0) < TARGET_FAILOVER_S),
        f"  failover: path back after s   {_span(back, '{:.2f}')}"
        + _verdict(back, max(back, default=0) < TARGET_BACK_S),
        *(["  receipt-verified:", *_goodput_lines(lfn, loop, "receipt")] if receipt else []),
        f"  (targets: >= {TARGET_BOTTLENECK:g} of the bottleneck, >= {TARGET_IPERF3:g} of iperf3,"
        f" >= {TARGET_PEERS:g} of the best of gridftp and xrdcp with the same streams,"
        f" Jain >= {TARGET_JAIN:g}, loopback >= {TARGET_IPERF3_LOOPBACK:g} of iperf3 and"
        f" >= {TARGET_PEERS_LOOPBACK:g} of the best peer"
        f" ({TARGET_PEERS_LOOPBACK_RECEIPT:g} receipt-verified),"
        f" lost < {TARGET_FAILOVER_S:g} s, back < {TARGET_BACK_S:g} s)",
    ]


def _goodput_lines(
    lfn: Sequence[SummaryRow], loop: Sequence[SummaryRow], verification: str
) -> list[str]:
    """The goodput ratios of the reservoir rows verified by ``verification``."""
    lfn = [x for x in lfn if x.verification in (verification, None)]
    loop = [x for x in loop if x.verification in (verification, None)]
    goodput = [x.of_bottleneck for x in lfn if x.of_bottleneck is not None]
    vs_iperf3 = [x.of_iperf3 for x in lfn if x.of_iperf3 is not None]
    vs_peers = [x.of_peers for x in lfn if x.of_peers is not None]
    loop_ratio = [x.of_iperf3 for x in loop if x.of_iperf3 is not None]
    loop_peers = [x.of_peers for x in loop if x.of_peers is not None]
    receipt = verification == "receipt"
    loop_beat = TARGET_PEERS_LOOPBACK_RECEIPT if receipt else TARGET_PEERS_LOOPBACK
    return [
        f"  LFN goodput / bottleneck      {_span(goodput)}"
        + _verdict(goodput, min(goodput, default=0) >= TARGET_BOTTLENECK),
        f"  LFN goodput / iperf3          {_span(vs_iperf3)}"
        + _verdict(vs_iperf3, min(vs_iperf3, default=0) >= TARGET_IPERF3),
        f"  LFN goodput / best peer       {_span(vs_peers)}"
        + _verdict(vs_peers, min(vs_peers, default=0) >= TARGET_PEERS),
        f"  loopback copy / iperf3        {_span(loop_ratio)}"
        + _verdict(loop_ratio, min(loop_ratio, default=0) >= TARGET_IPERF3_LOOPBACK),
        f"  loopback copy / best peer     {_span(loop_peers)}"
        + _verdict(loop_peers, min(loop_peers, default=0) >= loop_beat),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="make bench", description="the quick subset of every shipped campaign"
    )
    parser.add_argument(
        "--full", action="store_true", help="every campaign's whole matrix and repetitions"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="default: campaign-runs/bench-YYYYmmdd-HHMMSS (full-... with --full)",
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these campaigns only")
    args = parser.parse_args(argv)
    kind = "full" if args.full else "bench"
    out: Path = args.out or Path("campaign-runs") / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    files = [f for f in shipped() if not args.only or f.stem in args.only]
    worst = 0
    results = []
    for f in files:
        print(f"\n=== {f.stem} ({'whole matrix' if args.full else 'quick subset'})", flush=True)
        code = run_main(f, quick=not args.full, out=out / f.stem)
        if code in (130, 143):
            return code
        worst = max(worst, code)
        if (out / f.stem / "results.json").exists():
            results.append(CampaignRun.load(out / f.stem / "results.json"))
    target = "bench-full" if args.full else "bench"
    print(f"\n=== make {target}: {len(results)} campaigns, results in {out}")
    for r in results:
        print(f"\n{r.campaign}:\n{format_results(r)}")
    print()
    print("\n".join(figures(results)))
    return worst


if __name__ == "__main__":
    sys.exit(main())
