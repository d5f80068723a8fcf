"""Agents' control tokens are no longer stored: the coordinator derives each agent's
tokens from its secret key (``core/agent_credentials.py``), so the clear ``api_token``
column goes. A token stored by an earlier version cannot be kept: each agent so
registered must be given the derived token (``reservoir server agent-credentials
NAME``). With ``secure_delete`` on (``db.py``), SQLite overwrites the old column's
pages instead of leaving the tokens in the file's free pages.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("api_token")


def downgrade() -> None:
    # the tokens are gone: an empty one, which no agent accepts (its own config holds
    # the derived token's digest)
    with op.batch_alter_table("agents") as batch:
        batch.add_column(
            sa.Column("api_token", sa.String(length=1024), nullable=False, server_default="")
        )
