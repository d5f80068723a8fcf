"""``/campaigns``: the shipped campaigns, campaign runs (start, watch, cancel), their
results and HTML report, and the import of a run made elsewhere (issues 5 and 6)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, status
from fastapi.responses import HTMLResponse, JSONResponse

from reservoir.campaigns.results import CampaignRun
from reservoir.server.app.api.deps import (
    AUTH_RESPONSES,
    NOT_FOUND,
    STANDBY_RESPONSE,
    LeaderOnly,
    SessionDep,
    SettingsDep,
    UserAuth,
)
from reservoir.server.app.campaign_models import (
    CampaignAvailable,
    CampaignRunCreate,
    CampaignRunDetail,
    CampaignRunPublic,
)
from reservoir.server.app.campaign_watch import CampaignWatcher
from reservoir.server.app.services import campaigns

__all__ = ["UPLOAD_PATHS", "router"]

router = APIRouter(
    prefix="/campaigns", tags=["campaigns"], responses=AUTH_RESPONSES, dependencies=[UserAuth]
)

# what may carry a body up to ``max_upload_bytes`` (every other body: ``max_body_bytes``)
UPLOAD_PATHS = ("/campaigns/results",)
RunId = Annotated[str, Path(description="campaign run id", max_length=36)]
# a results.json, as the schema of :mod:`reservoir.campaigns.results` declares it
RESULTS_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CampaignRun"}}},
    }
}
# the report is inert: no scripts, nothing fetched, its plots inline
REPORT_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def get_watcher(request: Request) -> CampaignWatcher:
    watcher: CampaignWatcher = request.app.state.campaigns
    return watcher


WatcherDep = Annotated[CampaignWatcher, Depends(get_watcher)]


@router.get("/available", summary="The shipped campaigns a run can be started from")
def list_campaigns() -> list[CampaignAvailable]:
    return campaigns.available()


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Start a run of a shipped campaign (the runner runs in the background)",
    responses=STANDBY_RESPONSE
    | {
        409: {"description": "a campaign run is going on (one lab at a time)"},
        422: {"description": "no such campaign, or its file is not valid (one entry a line)"},
    },
    dependencies=[LeaderOnly],
)
def start_campaign_run(
    body: CampaignRunCreate,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    watcher: WatcherDep,
) -> CampaignRunPublic:
    """A campaign on a real topology runs through this coordinator, acting with the
    requester's token."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    user_token = token.strip() if scheme.lower() == "bearer" else None
    return campaigns.public(campaigns.start(session, body, settings, watcher, user_token))


@router.get("", summary="The campaign runs, newest first (without their results)")
def list_campaign_runs(session: SessionDep) -> list[CampaignRunPublic]:
    return [campaigns.public(row) for row in campaigns.list_all(session)]


@router.post(
    "/results",
    status_code=status.HTTP_201_CREATED,
    summary="Import a finished run's results.json (reservoir campaign upload)",
    openapi_extra=RESULTS_BODY,
    responses={
        409: {"description": "these results (campaign and run_id) are stored already"},
        422: {"description": "the results do not validate; loc names the bad field"},
    },
)
def import_campaign_results(
    session: SessionDep,
    body: Annotated[Any, Body(description="results.json of a campaign run")],
    quick: Annotated[bool, Query(description="the run was of the quick subset")] = False,
) -> CampaignRunPublic:
    return campaigns.public(campaigns.import_results(session, body, quick))


@router.get("/{run_id}", responses=NOT_FOUND, summary="One run: its progress and summary rows")
def get_campaign_run(run_id: RunId, session: SessionDep) -> CampaignRunDetail:
    return campaigns.detail(campaigns.get(session, run_id))


@router.get(
    "/{run_id}/results",
    responses=NOT_FOUND | {200: {"model": CampaignRun, "description": "the results.json"}},
    summary="The run's results (its results.json; the runs so far while it runs)",
)
def get_campaign_results(run_id: RunId, session: SessionDep) -> JSONResponse:
    return JSONResponse(campaigns.results(session, run_id))


@router.get(
    "/{run_id}/report",
    response_class=HTMLResponse,
    responses=NOT_FOUND,
    summary="The run's HTML report (one page, plots inline)",
)
def get_campaign_report(run_id: RunId, session: SessionDep, settings: SettingsDep) -> HTMLResponse:
    page = campaigns.report_html(session, run_id, settings)
    return HTMLResponse(page, headers={"Content-Security-Policy": REPORT_CSP})


@router.post(
    "/{run_id}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    responses=NOT_FOUND | STANDBY_RESPONSE | {409: {"description": "the run has ended"}},
    dependencies=[LeaderOnly],
    summary="Stop a running campaign (SIGTERM: the runner cleans up, then ends cancelled)",
)
def cancel_campaign_run(
    run_id: RunId, session: SessionDep, watcher: WatcherDep
) -> CampaignRunPublic:
    return campaigns.public(campaigns.cancel(session, run_id, watcher))
