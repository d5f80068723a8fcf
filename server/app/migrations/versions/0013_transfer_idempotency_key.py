"""Transfers keep the Idempotency-Key they were created with (unique) and the SHA-256
of that request's body: the same key again returns the first transfer.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27 08:10:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("transfers") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("request_digest", sa.String(length=64), nullable=True))
        batch.create_unique_constraint("uq_transfers_idempotency_key", ["idempotency_key"])


def downgrade() -> None:
    with op.batch_alter_table("transfers") as batch:
        batch.drop_constraint("uq_transfers_idempotency_key", type_="unique")
        batch.drop_column("request_digest")
        batch.drop_column("idempotency_key")
