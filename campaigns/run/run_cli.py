"""``reservoir campaign run CAMPAIGN [--quick] [--out DIR] [--coordinator URL
--token-file F]``: the runner with its progress display, log, exit codes and signal
handling. A real topology runs on the coordinator's registered agents and links (the
URL and token as ``reservoir transfer`` takes them); nothing is built then.

Exit codes: 0 every run completed (whether or not it met its targets), 1 a run failed
or the lab could not be built, 2 a campaign file that cannot be run (also: one whose
agents, links or volume sets the coordinator does not have), 130 interrupted
(Ctrl-C), 143 terminated (SIGTERM). The lab, the agents and the coordinator are
stopped and removed in every case.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from reservoir.campaigns._spec import Campaign, CampaignFileError, load
from reservoir.campaigns.results import CampaignRun, format_results
from reservoir.campaigns.run.progress import Progress
from reservoir.campaigns.run.runner import Cancelled, estimates, run_campaign
from reservoir.lab import netns
from reservoir.server.clients.campaign_upload import UploadError, read_token
from reservoir.server.clients.transfer_cli import DEFAULT_SERVER, ENV_SERVER

__all__ = ["default_out", "run_main"]

PROG = "reservoir campaign run"
MAX_REPETITIONS = 100


def default_out(name: str) -> Path:
    return Path("campaign-runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _on_term(main_pid: int, signum: int, frame: FrameType | None) -> None:
    """Stop the campaign, in the runner's own process only: a process forked from it
    (pyroute2 forks one to work in another namespace, and stops it with SIGTERM) must
    simply end, not unwind the runner's cleanup of the lab."""
    if os.getpid() != main_pid:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise Cancelled(f"signal {signum}")


def _coordinator(url: str | None, token_file: Path | None) -> tuple[str, str | None]:
    """(URL, token) of the coordinator a real topology is registered in; the token's
    file is read here, so that a bad one is refused before anything runs."""
    try:
        token = read_token(token_file)
    except UploadError as exc:
        raise CampaignFileError(f"--token-file: {exc}") from None
    return (url or os.environ.get(ENV_SERVER) or DEFAULT_SERVER), token


def _with_repetitions(campaign: Campaign, repetitions: int | None, quick: bool) -> Campaign:
    """The campaign with ``--repetitions`` in place of the file's, for the part that
    runs; a count out of range is a :class:`CampaignFileError`."""
    if repetitions is None:
        return campaign
    if not 1 <= repetitions <= MAX_REPETITIONS:
        raise CampaignFileError(f"--repetitions: 1 to {MAX_REPETITIONS}, got {repetitions}")
    if quick:
        return dataclasses.replace(campaign, quick_repetitions=repetitions)
    return dataclasses.replace(campaign, repetitions=repetitions)


def _finish(prog: Progress, result: CampaignRun, out: Path) -> int:
    """Progress, summary and exit code of a campaign that ran to its end."""
    failed = [r for r in result.runs if not r.ok]
    if failed:
        first = f"{failed[0].scenario.name}: {failed[0].error}"
        prog.finish("failed", f"{len(failed)} of {len(result.runs)} runs failed; {first}")
    else:
        prog.finish("completed")
    prog.say(format_results(result))
    prog.say(f"results: {out / 'results.json'}\nreport:  {out / 'report.html'}")
    return 1 if failed else 0


def _run(
    campaign: Campaign,
    out: Path,
    prog: Progress,
    quick: bool,
    remote: tuple[str, str | None] | None,
) -> int:
    """Runs the campaign with SIGTERM turned into a cancellation; the exit code."""
    previous = signal.signal(signal.SIGTERM, functools.partial(_on_term, os.getpid()))
    try:
        result = run_campaign(campaign, out, prog, quick=quick, coordinator=remote)
    except (Cancelled, KeyboardInterrupt) as exc:
        interrupted = isinstance(exc, KeyboardInterrupt)
        prog.finish("cancelled", "interrupted" if interrupted else "terminated")
        prog.say(f"cancelled; the runs so far are in {out / 'results.json'}")
        return 130 if interrupted else 143
    except Exception as exc:
        prog.finish("failed", str(exc) or type(exc).__name__)
        prog.say(f"{PROG}: {exc}")
        return 2 if isinstance(exc, CampaignFileError) else 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    return _finish(prog, result, out)


def run_main(
    file: Path,
    *,
    quick: bool = False,
    out: Path | None = None,
    repetitions: int | None = None,
    coordinator: str | None = None,
    token_file: Path | None = None,
) -> int:
    try:
        campaign = _with_repetitions(load(file), repetitions, quick)
        real = campaign.topology.kind == "real"
        remote = _coordinator(coordinator, token_file) if real else None
    except CampaignFileError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    why = None if real else netns.can_create()
    if why is not None:
        print(f"{PROG}: cannot build the lab here: {why}", file=sys.stderr)
        return 1
    # absolute: the agents' configuration files name each other by path
    out = (out if out is not None else default_out(campaign.name)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "log.txt", "a", buffering=1) as log:

        def to_log(line: str) -> None:
            log.write(line + "\n")

        prog = Progress(out, estimates(campaign, quick), log=to_log)
        which = "quick subset" if quick else "matrix"
        prog.say(
            f"{campaign.name} ({which}): {prog.total} runs, about"
            f" {campaign.estimate_seconds(quick=quick) / 60:.0f} min; results in {out}"
        )
        return _run(campaign, out, prog, quick, remote)
