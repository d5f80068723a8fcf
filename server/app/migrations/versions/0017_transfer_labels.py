"""Labels of transfers (key=value), listed by.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27 10:20:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "transfer_labels",
        sa.Column("transfer_id", sa.String(length=36), nullable=False),
        sa.Column("key", sa.String(length=63), nullable=False),
        sa.Column("value", sa.String(length=255), nullable=False),
        sa.ForeignKeyConstraint(
            ["transfer_id"],
            ["transfers.id"],
            name=op.f("fk_transfer_labels_transfer_id_transfers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("transfer_id", "key", name=op.f("pk_transfer_labels")),
    )
    op.create_index("ix_transfer_labels_key_value", "transfer_labels", ["key", "value"])


def downgrade() -> None:
    op.drop_index("ix_transfer_labels_key_value", table_name="transfer_labels")
    op.drop_table("transfer_labels")
