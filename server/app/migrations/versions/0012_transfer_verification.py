"""Transfers name how their extents are verified: storage (the destination hashes what
it holds) or receipt (its receipts of what its writes received); existing ones: storage.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("transfers") as batch:
        batch.add_column(
            sa.Column("verification", sa.String(length=8), nullable=False, server_default="storage")
        )


def downgrade() -> None:
    with op.batch_alter_table("transfers") as batch:
        batch.drop_column("verification")
