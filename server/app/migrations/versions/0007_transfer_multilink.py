"""Transfers say their multilink mode: paths (streams bound to links) or mptcp.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-21 20:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("transfers") as batch:
        batch.add_column(
            sa.Column("multilink", sa.String(length=8), nullable=False, server_default="paths")
        )


def downgrade() -> None:
    with op.batch_alter_table("transfers") as batch:
        batch.drop_column("multilink")
