"""Transfers keep when they first ran and when they completed, and when they last
began running with their done bytes then (the API's rate and ETA come from those).
Existing transfers: none known, so no rate until they run again.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27 08:20:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMES = ("started_at", "completed_at", "running_since")


def upgrade() -> None:
    with op.batch_alter_table("transfers") as batch:
        for name in TIMES:
            batch.add_column(sa.Column(name, sa.DateTime(timezone=True), nullable=True))
        batch.add_column(
            sa.Column("running_since_bytes", sa.BigInteger(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("transfers") as batch:
        batch.drop_column("running_since_bytes")
        for name in reversed(TIMES):
            batch.drop_column(name)
