"""Transfers may name the TCP congestion control of their streams.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-21 20:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("transfers") as batch:
        batch.add_column(sa.Column("congestion", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("transfers") as batch:
        batch.drop_column("congestion")
