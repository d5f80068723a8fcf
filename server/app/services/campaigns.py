"""Campaign runs: the shipped campaigns, starting a run (one at a time: a campaign
owns the machine's lab), cancelling it, importing a finished run's results, and the
run's summary and HTML report. The runner itself is followed by ``campaign_watch.py``.

Campaigns, their results and reports are those of :mod:`reservoir.campaigns`, the
component the runner and the report use too.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from reservoir.campaigns import (
    CAMPAIGN_DIR,
    DATA_ROOT,
    Campaign,
    CampaignFileError,
    load,
    shipped,
)
from reservoir.campaigns import report as campaign_report
from reservoir.campaigns.results import CampaignRun as Results
from reservoir.campaigns.results import ResultsError
from reservoir.common.store import write_atomic
from reservoir.server.app.campaign_models import (
    ACTIVE_STATES,
    CampaignAvailable,
    CampaignOrigin,
    CampaignProgress,
    CampaignRunCreate,
    CampaignRunDetail,
    CampaignRunPublic,
    CampaignState,
)
from reservoir.server.app.campaign_watch import (
    CampaignWatcher,
    spawn,
    store_results,
    validate_results,
)
from reservoir.server.app.core.config import ServerSettings
from reservoir.server.app.errors import ConflictError, InvalidRequestError, Loc, NotFoundError
from reservoir.server.app.tables import CampaignRun, utcnow

__all__ = [
    "available",
    "cancel",
    "detail",
    "get",
    "import_results",
    "list_all",
    "public",
    "report_html",
    "results",
    "start",
]

S = CampaignState
FINAL = (S.COMPLETED.value, S.FAILED.value, S.CANCELLED.value)


class InvalidFieldsError(InvalidRequestError):
    """A 422 with several entries (a campaign file's problems, one per line)."""

    def __init__(self, errors: Sequence[tuple[Loc, str]]) -> None:
        super().__init__(errors[0][0], errors[0][1])
        self.errors = [
            {"loc": ["body", *loc], "msg": msg, "type": "value_error"} for loc, msg in errors
        ]

    def field_errors(self) -> list[dict[str, Any]] | None:
        return self.errors


# ---------------------------------------------------------------- views


def public(row: CampaignRun) -> CampaignRunPublic:
    return CampaignRunPublic.model_validate(_fields(row))


def detail(row: CampaignRun) -> CampaignRunDetail:
    summary = row.summary or {}
    return CampaignRunDetail.model_validate(
        {
            **_fields(row),
            "summary": summary.get("rows", []),
            "runs_recorded": summary.get("runs", 0),
            "runs_failed": summary.get("failed", 0),
            "topology": summary.get("topology"),
            "bottleneck_bps": summary.get("bottleneck_bps"),
        }
    )


def _fields(row: CampaignRun) -> dict[str, Any]:
    return {
        "id": row.id,
        "campaign": row.campaign,
        "quick": row.quick,
        "origin": row.origin,
        "state": row.state,
        "progress": CampaignProgress(
            done=row.done,
            total=row.total,
            scenario=row.scenario,
            repetition=row.repetition,
            elapsed_s=row.elapsed_s,
            eta_s=row.eta_s,
        ),
        "error": row.error,
        "exit_code": row.exit_code,
        "run_id": row.run_id,
        "created_at": row.created_at,
        "started_at": row.started_at,
        "finished_at": row.finished_at,
        "results_at": row.results_at,
        "has_results": row.results_at is not None,
        "out_dir": row.out_dir,
    }


def get(session: Session, run_id: str) -> CampaignRun:
    row = session.get(CampaignRun, run_id)
    if row is None:
        raise NotFoundError("campaign run", run_id)
    return row


def list_all(session: Session) -> Sequence[CampaignRun]:
    """Newest first (the results stay unloaded: a deferred column)."""
    query = select(CampaignRun).order_by(CampaignRun.created_at.desc(), CampaignRun.id)
    return session.scalars(query).all()


def results(session: Session, run_id: str) -> dict[str, Any]:
    row = get(session, run_id)
    if row.results is None:
        raise NotFoundError("results of campaign run", run_id)
    return row.results


# ---------------------------------------------------------------- shipped campaigns


def available() -> list[CampaignAvailable]:
    """Every file of config/campaigns, with its scenario counts and time estimates."""
    out = []
    for path in shipped():
        file = path.relative_to(DATA_ROOT) if path.is_relative_to(DATA_ROOT) else path
        entry: dict[str, Any] = {"name": path.stem, "file": str(file)}
        try:
            c = load(path)
        except CampaignFileError as exc:
            entry["error"] = str(exc)
        else:
            entry.update(
                description=c.description,
                scenarios=len(c.scenarios()),
                repetitions=c.repetitions,
                estimate_s=c.estimate_seconds(),
                quick_scenarios=len(c.quick()),
                quick_repetitions=c.quick_repetitions,
                quick_estimate_s=c.estimate_seconds(quick=True) if c.quick() else None,
            )
        out.append(CampaignAvailable.model_validate(entry))
    return out


def resolve(name: str) -> Path:
    """A shipped campaign by name (``loopback``), file name (``loopback.toml``) or path
    under config/campaigns (relative to the repository, or absolute); 422 otherwise,
    listing the shipped ones."""
    text = name.strip()
    names = {p.stem: p for p in shipped()}
    if text in names:
        return names[text]
    home = CAMPAIGN_DIR.resolve()
    try:
        given = Path(text)
        for candidate in (home / given, DATA_ROOT / given):
            found = candidate.resolve()
            if found.suffix == ".toml" and found.is_relative_to(home) and found.is_file():
                return found
    except (OSError, ValueError):  # a NUL byte, a name too long
        pass
    listed = ", ".join(names) or "none"
    raise InvalidRequestError(
        ("campaign",),
        f"no campaign {text[:200]!r}: give a shipped one ({listed}) or a file under "
        "config/campaigns",
    )


def _load(path: Path, quick: bool) -> Campaign:
    try:
        campaign = load(path)
    except CampaignFileError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        if len(lines) > 1 and lines[0].endswith(":"):  # the file's path: the loc says it
            lines = lines[1:]
        raise InvalidFieldsError([(("campaign",), line) for line in lines]) from None
    if quick and not campaign.quick():
        raise InvalidRequestError(("quick",), f"campaign {campaign.name!r} has no quick subset")
    return campaign


# ---------------------------------------------------------------- runs


def own_url(settings: ServerSettings) -> str:
    """This coordinator as a runner on its host reaches it."""
    host = settings.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1" if host != "::" else "::1"
    return f"http://{f'[{host}]' if ':' in host else host}:{settings.port}"


def runner_env(campaign: Campaign, token: str | None) -> dict[str, str]:
    """A real campaign's runner works through this coordinator (``--coordinator``) with
    the token of the user who started it, in its environment (not on its command line)."""
    return {"RESERVOIR_TOKEN": token} if campaign.topology.kind == "real" and token else {}


def start(
    session: Session,
    body: CampaignRunCreate,
    settings: ServerSettings,
    watcher: CampaignWatcher,
    token: str | None = None,
) -> CampaignRun:
    """Validates the campaign, refuses a second run (409), starts the runner (a real
    campaign's acting with ``token``, the requester's)."""
    path = resolve(body.campaign)
    campaign = _load(path, body.quick)
    if body.quick:
        total = len(campaign.quick()) * campaign.quick_repetitions
    else:
        total = len(campaign.scenarios()) * campaign.repetitions
    with watcher.lock:
        _refuse_a_second_run(session)
        now = utcnow()
        row = CampaignRun(
            campaign=campaign.name,
            quick=body.quick,
            origin=CampaignOrigin.API.value,
            state=S.RUNNING.value,
            created_at=now,
            started_at=now,
            total=total,
        )
        session.add(row)
        session.flush()
        out = settings.data_path / "campaigns" / row.id
        argv = [*settings.campaign_command, str(path), *(["--quick"] if body.quick else [])]
        argv += ["--out", str(out)]
        if campaign.topology.kind == "real":
            argv += ["--coordinator", own_url(settings)]
        row.out_dir = str(out)
        try:
            out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            out.mkdir(mode=0o700)
            row.pid = spawn(argv, out, runner_env(campaign, token))
        except OSError as exc:
            row.state = S.FAILED.value
            row.finished_at = utcnow()
            row.error = f"the runner could not be started ({argv[0]}): {exc.strerror or exc}"
        else:
            watcher.follow(row.id, row.pid, out)
        session.commit()
    return row


def _refuse_a_second_run(session: Session) -> None:
    query = select(CampaignRun).where(CampaignRun.state.in_(ACTIVE_STATES)).limit(1)
    active = session.scalar(query)
    if active is not None:
        raise ConflictError(
            f"campaign run {active.id} ({active.campaign}) is {active.state}: one campaign "
            "at a time on this machine (it owns the lab); wait for it or cancel it"
        )


def cancel(session: Session, run_id: str, watcher: CampaignWatcher) -> CampaignRun:
    """SIGTERM to the runner; the run is ``cancelling`` until it has cleaned up."""
    row = get(session, run_id)
    with watcher.lock:
        session.refresh(row)
        if row.state == S.CANCELLING:
            return row
        if row.state != S.RUNNING:
            raise ConflictError(f"campaign run {run_id} is {row.state}: it cannot be cancelled")
        if row.pid is not None and row.out_dir:
            watcher.terminate(row.id, row.pid, Path(row.out_dir))
        row.state = S.CANCELLING.value
        session.commit()
    return row


# ---------------------------------------------------------------- import


_FIELD = re.compile(r"^([A-Za-z_]\w*(?:\[\d+\])*(?:\.[A-Za-z_]\w*(?:\[\d+\])*)*): (.+)$", re.S)


def _loc(path: str) -> list[str | int]:
    """``runs[2].streams[0].bps`` -> ``["runs", 2, "streams", 0, "bps"]``."""
    loc: list[str | int] = []
    for part in path.split("."):
        name, *indexes = re.split(r"\[(\d+)\]", part)
        loc.append(name)
        loc.extend(int(i) for i in indexes if i)
    return loc


def _results_error(message: str) -> InvalidFieldsError:
    match = _FIELD.match(message)
    if match is None or match.group(1) == "results":
        return InvalidFieldsError([((), match.group(2) if match else message)])
    return InvalidFieldsError([(_loc(match.group(1)), match.group(2))])


def _when(unix: float | None) -> datetime | None:
    if unix is None:
        return None
    try:
        return datetime.fromtimestamp(unix, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def import_results(session: Session, data: Any, quick: bool) -> CampaignRun:
    """Stores a finished run's results.json (validated: 422 naming the bad field; 409 if
    a run holds the same campaign and run_id already)."""
    try:
        stored = validate_results(data)
    except ResultsError as exc:
        raise _results_error(str(exc)) from None
    campaign, run_id = stored.campaign[:128], stored.run_id[:128]
    query = select(CampaignRun.id).where(
        CampaignRun.campaign == campaign, CampaignRun.run_id == run_id
    )
    same = session.scalar(query.limit(1))
    if same is not None:
        raise ConflictError(f"campaign run {same} holds these results already (run_id {run_id!r})")
    runs = stored.summary["runs"]
    row = CampaignRun(
        campaign=campaign,
        quick=quick,
        origin=CampaignOrigin.IMPORT.value,
        state=S.COMPLETED.value if stored.finished else S.FAILED.value,
        error=None if stored.finished else "imported results of a run that did not finish",
        created_at=utcnow(),
        started_at=_when(stored.data["started"]),
        finished_at=_when(stored.data["finished"]),
        done=runs,
        total=runs,
    )
    if stored.finished:
        row.elapsed_s = stored.data["finished"] - stored.data["started"]
    store_results(row, stored)
    session.add(row)
    session.commit()
    return row


# ---------------------------------------------------------------- report


_SVG_IMG = re.compile(r"""<img\s+src=(['"])([\w.-]+\.svg)\1[^>]*>""")


def report_html(session: Session, run_id: str, settings: ServerSettings) -> str:
    """The run's HTML report, one self-contained page: the runner's report.html once it
    has ended, else (or without it) made from the stored results; a final run's page
    is kept in its folder."""
    row = get(session, run_id)
    folder = Path(row.out_dir) if row.out_dir else settings.data_path / "campaigns" / row.id
    final = row.state in FINAL
    for name in ("report.html", "report-coordinator.html"):
        page = folder / name
        if final and page.is_file():
            return _inline_svg(page.read_text(encoding="utf-8", errors="replace"), folder)
    data = row.results
    if data is None:
        raise NotFoundError("results of campaign run", run_id)
    text = _render(data)
    if final:
        _save(folder / "report-coordinator.html", text)
    return text


def _render(data: dict[str, Any]) -> str:

    result = Results.from_json(data)
    one_page = getattr(campaign_report, "report_html", None)
    if one_page is not None:
        text: str = one_page(result)
        return text
    with tempfile.TemporaryDirectory(prefix="reservoir-report-") as tmp:
        index = campaign_report.write_report(result, Path(tmp))
        return _inline_svg(index.read_text(encoding="utf-8"), Path(tmp))


def _inline_svg(page: str, folder: Path) -> str:
    """Plots a report refers to as files beside it, written into the page instead."""

    def inline(match: re.Match[str]) -> str:
        try:
            svg = (folder / match.group(2)).read_text(encoding="utf-8")
        except OSError:
            return match.group(0)
        return re.sub(r"^<\?xml[^>]*\?>\s*", "", svg)

    return _SVG_IMG.sub(inline, page)


def _save(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, text.encode(), mode=0o644, durable=False)
    except OSError:  # a cache only
        pass
