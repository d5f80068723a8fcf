"""The bodies of ``/campaigns``: ``CampaignRunBase`` -> ``CampaignRunCreate`` (what a
client sends to start a run) / ``CampaignRunPublic`` (a run in the list) and
``CampaignRunDetail`` (one run with its summary rows); the shipped campaigns a run can
be started from (``CampaignAvailable``).

The summary rows are :class:`reservoir.campaigns.results.SummaryRow`, as
``summary_rows`` makes them: one per scenario, medians over its repetitions, with the
design section 6 targets that apply (``checks``: column -> target, met or not).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from reservoir.campaigns.results import SummaryRow

__all__ = [
    "ACTIVE_STATES",
    "CampaignAvailable",
    "CampaignOrigin",
    "CampaignProgress",
    "CampaignRunBase",
    "CampaignRunCreate",
    "CampaignRunDetail",
    "CampaignRunPublic",
    "CampaignState",
]


class CampaignState(StrEnum):
    RUNNING = "running"
    CANCELLING = "cancelling"  # SIGTERM sent; the runner cleans the lab up
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_STATES = (CampaignState.RUNNING.value, CampaignState.CANCELLING.value)


class CampaignOrigin(StrEnum):
    API = "api"  # started by the coordinator
    IMPORT = "import"  # a run elsewhere, its results.json posted


class CampaignRunBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    campaign: str = Field(
        min_length=1,
        max_length=4096,
        description="a shipped campaign's name, or its file under config/campaigns",
    )
    quick: bool = Field(default=False, description="only the campaign's quick subset")


class CampaignRunCreate(CampaignRunBase):
    pass


class CampaignProgress(BaseModel):
    """What the runner last wrote in progress.json."""

    done: int = Field(description="runs finished")
    total: int = Field(description="runs planned")
    scenario: str | None = Field(default=None, description="the scenario running")
    repetition: int | None = Field(default=None, description="its repetition, from 1")
    elapsed_s: float | None = None
    eta_s: float | None = Field(default=None, description="seconds left, the runner's model")


class CampaignRunPublic(CampaignRunBase):
    model_config = ConfigDict(extra="forbid")

    campaign: str = Field(description="the campaign's name")
    id: str
    origin: CampaignOrigin
    state: CampaignState
    progress: CampaignProgress
    error: str | None = Field(default=None, description="why it failed (with the log's tail)")
    exit_code: int | None = Field(default=None, description="the runner's exit status")
    run_id: str | None = Field(default=None, description="the results' run_id")
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    results_at: datetime | None = Field(default=None, description="results last stored")
    has_results: bool
    out_dir: str | None = Field(default=None, description="the runner's folder on the server")


class CampaignRunDetail(CampaignRunPublic):
    summary: list[SummaryRow] = Field(default_factory=list)
    runs_recorded: int = Field(default=0, description="runs in the results")
    runs_failed: int = Field(default=0, description="of them, runs with an error")
    topology: str | None = Field(default=None, description="lab, loopback or real")
    bottleneck_bps: float | None = None


class CampaignAvailable(BaseModel):
    """A shipped campaign (config/campaigns/NAME.toml); ``error`` if it does not load."""

    name: str
    file: str = Field(description="relative to the repository")
    description: str | None = None
    scenarios: int | None = None
    repetitions: int | None = None
    estimate_s: float | None = Field(default=None, description="the time model's estimate")
    quick_scenarios: int | None = None
    quick_repetitions: int | None = None
    quick_estimate_s: float | None = None
    error: str | None = None
