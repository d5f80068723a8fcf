"""Stream samples say how many seconds they stand for (merged ones more than one
interval). Existing samples: None, one agent interval.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27 11:10:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("stream_samples") as batch:
        batch.add_column(sa.Column("span", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("stream_samples") as batch:
        batch.drop_column("span")
