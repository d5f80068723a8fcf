"""Stream samples say what held each stream back: the shares of the interval it was
busy, limited by the receive window, limited by the send buffer.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-22 07:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("busy", "rwnd_limited", "sndbuf_limited")


def upgrade() -> None:
    with op.batch_alter_table("stream_samples") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("stream_samples") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
