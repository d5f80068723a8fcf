"""Link probes: iperf3 measurements of a link, its recommendation (streams, NIC
pacing), and what a transfer took from its links' recommendations.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("links") as batch:
        batch.add_column(sa.Column("probe_state", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("probe_error", sa.String(length=4096), nullable=True))
        batch.add_column(sa.Column("probe_started_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("probe_finished_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("probe_measurements", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("recommended_streams", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("recommended_pacing", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("recommended_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("transfers") as batch:
        batch.add_column(sa.Column("recommendation_applied", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("transfers") as batch:
        batch.drop_column("recommendation_applied")
    with op.batch_alter_table("links") as batch:
        for column in (
            "recommended_at",
            "recommended_pacing",
            "recommended_streams",
            "probe_measurements",
            "probe_finished_at",
            "probe_started_at",
            "probe_error",
            "probe_state",
        ):
            batch.drop_column(column)
