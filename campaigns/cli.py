"""``reservoir campaign ...``: check a campaign file and list its scenarios (``show``),
run it (``run``), and write the report of a campaign run's results (``report``).

    reservoir campaign show config/campaigns/lfn-2x500m-100ms.toml [--quick]
    reservoir campaign run lfn-2x500m-100ms [--quick] [--out DIR]
    reservoir campaign run my-wan.toml --coordinator URL --token-file F   # topology.real
    reservoir campaign report results.json [--out DIR]
    reservoir campaign upload DIR [--coordinator URL]   # store a run in the coordinator

A campaign is a file, or the name of one in config/campaigns/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from reservoir.campaigns import CAMPAIGN_DIR, CampaignFileError, load
from reservoir.campaigns.report import report_main
from reservoir.server.clients.campaign_upload import add_upload_parser

__all__ = ["register", "report", "resolve", "run", "show"]

Sub = Any  # argparse's _SubParsersAction is private


def register(sub: Sub) -> None:
    parser = sub.add_parser("campaign", help="LFN benchmarking campaigns: check, run, report")
    csub = parser.add_subparsers(dest="campaign_command", required=True, metavar="ACTION")
    p = csub.add_parser("show", help="check a campaign file and list its scenarios")
    p.add_argument("file", type=Path, metavar="FILE", help="config/campaigns/NAME.toml")
    p.add_argument("--quick", action="store_true", help="only the quick subset (make bench)")
    p.set_defaults(func=show)
    g = csub.add_parser("run", help="run a campaign on the lab it describes (root)")
    g.add_argument(
        "file", metavar="CAMPAIGN", help="a campaign file, or a name in config/campaigns"
    )
    g.add_argument("--quick", action="store_true", help="only the quick subset (make bench)")
    g.add_argument(
        "--out", type=Path, metavar="DIR", help="default: campaign-runs/NAME-YYYYmmdd-HHMMSS"
    )
    g.add_argument(
        "--repetitions",
        type=int,
        metavar="N",
        help="run every scenario N times (1-100), not as the file says",
    )
    g.add_argument(
        "--coordinator",
        metavar="URL",
        help="topology.real: the coordinator the agents and links are registered in"
        " (default $RESERVOIR_SERVER_URL, else http://127.0.0.1:8470)",
    )
    g.add_argument(
        "--token-file", type=Path, metavar="F", help="its user token (default $RESERVOIR_TOKEN)"
    )
    g.set_defaults(func=run)
    r = csub.add_parser("report", help="write the HTML report of a campaign run's results")
    r.add_argument("run", type=Path, metavar="RUN", help="a campaign results JSON file")
    r.add_argument("--out", type=Path, metavar="DIR", help="default: RUN-report/ beside it")
    r.set_defaults(func=report)
    add_upload_parser(csub)


def resolve(text: str | Path) -> Path:
    """A campaign file as given, or ``config/campaigns/NAME.toml`` for a bare name."""
    path = Path(text)
    if path.exists() or path.suffix == ".toml" or "/" in str(text):
        return path
    return CAMPAIGN_DIR / f"{text}.toml"


def show(args: argparse.Namespace) -> int:
    try:
        campaign = load(resolve(args.file))
    except CampaignFileError as exc:
        print(f"reservoir campaign show: {exc}", file=sys.stderr)
        return 2
    scenarios = campaign.quick() if args.quick else campaign.scenarios()
    reps = campaign.quick_repetitions if args.quick else campaign.repetitions
    which = "quick subset" if args.quick else "scenarios"
    print(f"{campaign.name}: {campaign.description}")
    print(f"{len(scenarios)} {which} x {reps} repetitions, about ", end="")
    print(f"{campaign.estimate_seconds(quick=args.quick) / 60:.1f} min")
    for s in scenarios:
        base = campaign.baseline_for(s, scenarios)
        print(f"  {s.name}" + (f"  (baseline {base.name})" if base is not None else ""))
    return 0


def report(args: argparse.Namespace) -> int:

    argv = [str(args.run)] + (["--out", str(args.out)] if args.out is not None else [])
    return report_main(argv)


def run(args: argparse.Namespace) -> int:
    # Lazy: the runner and its lab (0.25 s, 350 modules) load for `campaign run` only.
    from reservoir.campaigns.run.run_cli import run_main  # noqa: PLC0415

    return run_main(
        resolve(args.file),
        quick=args.quick,
        out=args.out,
        repetitions=args.repetitions,
        coordinator=args.coordinator,
        token_file=args.token_file,
    )
