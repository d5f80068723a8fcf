"""The lease of the leading coordinator: one row, held by nobody at first.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27 10:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    leases = op.create_table(
        "coordinator_leases",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=True),
        sa.Column("acquired_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_coordinator_leases")),
    )
    nobody = {"name": "leader", "holder": "", "url": None, "acquired_at": 0.0, "expires_at": 0.0}
    op.bulk_insert(leases, [nobody])


def downgrade() -> None:
    op.drop_table("coordinator_leases")
