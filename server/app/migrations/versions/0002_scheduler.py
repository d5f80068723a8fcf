"""The scheduler's columns: volume portals, the legs' agent copies and progress.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 15:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LEG_COLUMNS = ("summary", "last_error", "done_bytes", "copy_state", "copy_id")


def upgrade() -> None:
    op.add_column("agent_volumes", sa.Column("portal", sa.String(length=262), nullable=True))
    op.add_column(
        "transfers",
        sa.Column("done_bytes", sa.BigInteger(), server_default="0", nullable=False),
    )
    op.add_column("transfers", sa.Column("last_error", sa.String(length=4096), nullable=True))
    op.add_column("transfer_legs", sa.Column("copy_id", sa.String(length=80), nullable=True))
    op.add_column("transfer_legs", sa.Column("copy_state", sa.String(length=16), nullable=True))
    op.add_column(
        "transfer_legs",
        sa.Column("done_bytes", sa.BigInteger(), server_default="0", nullable=False),
    )
    op.add_column("transfer_legs", sa.Column("last_error", sa.String(length=4096), nullable=True))
    op.add_column("transfer_legs", sa.Column("summary", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("transfer_legs") as batch:
        for name in LEG_COLUMNS:
            batch.drop_column(name)
    with op.batch_alter_table("transfers") as batch:
        batch.drop_column("last_error")
        batch.drop_column("done_bytes")
    with op.batch_alter_table("agent_volumes") as batch:
        batch.drop_column("portal")
