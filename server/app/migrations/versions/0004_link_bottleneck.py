"""Links name the bottleneck they share with others (the equalizer's groups).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("links") as batch:
        batch.add_column(sa.Column("bottleneck", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("links") as batch:
        batch.drop_column("bottleneck")
