"""Agents' credentials (their tokens) have a generation, one more at each rotation;
existing agents keep generation 0, the tokens they have.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27 10:50:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(
            sa.Column("credentials_generation", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("credentials_generation")
