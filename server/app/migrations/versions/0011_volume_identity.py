"""Agents' volumes carry the device id their agent reported at registration (``naa.``
and the 32 hex digits of the NAA of VPD 0x83), so one device is known under any name.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("agent_volumes") as batch:
        batch.add_column(sa.Column("device_id", sa.String(length=37), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_volumes") as batch:
        batch.drop_column("device_id")
