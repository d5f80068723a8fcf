"""Telemetry: per-stream samples collected from the agents, NIC pacing rates.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21 16:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stream_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("transfer_id", sa.String(length=36), nullable=False),
        sa.Column("leg", sa.Integer(), nullable=False),
        sa.Column("copy_id", sa.String(length=80), nullable=False),
        sa.Column("stream", sa.String(length=32), nullable=False),
        sa.Column("path", sa.String(length=128), nullable=True),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("bits_per_second", sa.Float(), nullable=True),
        sa.Column("snd_cwnd", sa.BigInteger(), nullable=True),
        sa.Column("rtt", sa.BigInteger(), nullable=True),
        sa.Column("rttvar", sa.BigInteger(), nullable=True),
        sa.Column("retransmits", sa.BigInteger(), nullable=True),
        sa.Column("cap", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["transfer_id"],
            ["transfers.id"],
            name=op.f("fk_stream_samples_transfer_id_transfers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stream_samples")),
    )
    op.create_index(
        op.f("ix_stream_samples_transfer_id"), "stream_samples", ["transfer_id"], unique=False
    )
    op.create_table(
        "nic_pacing_rates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("transfer_id", sa.String(length=36), nullable=False),
        sa.Column("agent_id", sa.String(length=36), nullable=False),
        sa.Column("nic", sa.String(length=128), nullable=False),
        sa.Column("rate", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_nic_pacing_rates_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["transfer_id"],
            ["transfers.id"],
            name=op.f("fk_nic_pacing_rates_transfer_id_transfers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_nic_pacing_rates")),
        sa.UniqueConstraint(
            "transfer_id",
            "agent_id",
            "nic",
            name=op.f("uq_nic_pacing_rates_transfer_id_agent_id_nic"),
        ),
    )
    op.create_index(
        op.f("ix_nic_pacing_rates_agent_id"), "nic_pacing_rates", ["agent_id"], unique=False
    )
    op.create_index(
        op.f("ix_nic_pacing_rates_transfer_id"), "nic_pacing_rates", ["transfer_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_nic_pacing_rates_transfer_id"), table_name="nic_pacing_rates")
    op.drop_index(op.f("ix_nic_pacing_rates_agent_id"), table_name="nic_pacing_rates")
    op.drop_table("nic_pacing_rates")
    op.drop_index(op.f("ix_stream_samples_transfer_id"), table_name="stream_samples")
    op.drop_table("stream_samples")
