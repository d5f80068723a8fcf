"""Campaign runs: started by the coordinator or imported, with progress and results.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 12:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "campaign_runs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("campaign", sa.String(length=128), nullable=False),
        sa.Column("quick", sa.Boolean(), nullable=False),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("scenario", sa.String(length=256), nullable=True),
        sa.Column("repetition", sa.Integer(), nullable=True),
        sa.Column("elapsed_s", sa.Float(), nullable=True),
        sa.Column("eta_s", sa.Float(), nullable=True),
        sa.Column("error", sa.String(length=4096), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("out_dir", sa.String(length=4096), nullable=True),
        sa.Column("run_id", sa.String(length=128), nullable=True),
        sa.Column("results_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("results", sa.JSON(), nullable=True),
        sa.Column("summary", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_campaign_runs")),
    )
    op.create_index(op.f("ix_campaign_runs_state"), "campaign_runs", ["state"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_campaign_runs_state"), table_name="campaign_runs")
    op.drop_table("campaign_runs")
