"""Labels of agents (key=value), listed by.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27 10:50:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agent_labels",
        sa.Column("agent_id", sa.String(length=36), nullable=False),
        sa.Column("key", sa.String(length=63), nullable=False),
        sa.Column("value", sa.String(length=255), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_agent_labels_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("agent_id", "key", name=op.f("pk_agent_labels")),
    )
    op.create_index("ix_agent_labels_key_value", "agent_labels", ["key", "value"])


def downgrade() -> None:
    op.drop_index("ix_agent_labels_key_value", table_name="agent_labels")
    op.drop_table("agent_labels")
