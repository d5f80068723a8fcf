"""The initial schema: agents (NICs, volumes), volume sets, links, transfers (paths, legs, events).

Revision ID: 0001
Revises:
Create Date: 2026-11-21 14:48:05.146484
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("control_url", sa.String(length=2048), nullable=False),
        sa.Column("api_token", sa.String(length=1024), nullable=False),
        sa.Column("capabilities", sa.JSON(), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agents")),
        sa.UniqueConstraint("name", name=op.f("uq_agents_name")),
    )
    op.create_table(
        "volume_sets",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("stripe_unit", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_volume_sets")),
        sa.UniqueConstraint("name", name=op.f("uq_volume_sets_name")),
    )
    op.create_table(
        "agent_nics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("agent_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("address", sa.String(length=64), nullable=False),
        sa.Column("speed_bps", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_agent_nics_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_nics")),
        sa.UniqueConstraint("agent_id", "name", name=op.f("uq_agent_nics_agent_id_name")),
    )
    with op.batch_alter_table("agent_nics", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_agent_nics_agent_id"), ["agent_id"], unique=False)

    op.create_table(
        "agent_volumes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("agent_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("path", sa.String(length=4096), nullable=True),
        sa.Column("iqn", sa.String(length=223), nullable=True),
        sa.Column("lun", sa.Integer(), nullable=True),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("block_size", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_agent_volumes_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_volumes")),
        sa.UniqueConstraint("agent_id", "name", name=op.f("uq_agent_volumes_agent_id_name")),
    )
    with op.batch_alter_table("agent_volumes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_agent_volumes_agent_id"), ["agent_id"], unique=False)

    op.create_table(
        "links",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("agent_a_id", sa.String(length=36), nullable=False),
        sa.Column("nic_a", sa.String(length=128), nullable=False),
        sa.Column("agent_b_id", sa.String(length=36), nullable=False),
        sa.Column("nic_b", sa.String(length=128), nullable=False),
        sa.Column("capacity_bps", sa.BigInteger(), nullable=False),
        sa.Column("rtt_ms", sa.Double(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_a_id"],
            ["agents.id"],
            name=op.f("fk_links_agent_a_id_agents"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["agent_b_id"],
            ["agents.id"],
            name=op.f("fk_links_agent_b_id_agents"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_links")),
        sa.UniqueConstraint("name", name=op.f("uq_links_name")),
    )
    with op.batch_alter_table("links", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_links_agent_a_id"), ["agent_a_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_links_agent_b_id"), ["agent_b_id"], unique=False)

    op.create_table(
        "transfers",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("source_set_id", sa.String(length=36), nullable=False),
        sa.Column("dest_set_id", sa.String(length=36), nullable=False),
        sa.Column("streams_per_pair", sa.Integer(), nullable=False),
        sa.Column("pacing_policy", sa.String(length=16), nullable=False),
        sa.Column("pacing_margin", sa.Double(), nullable=False),
        sa.Column("equalizer", sa.Boolean(), nullable=False),
        sa.Column("verify", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("total_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dest_set_id"],
            ["volume_sets.id"],
            name=op.f("fk_transfers_dest_set_id_volume_sets"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["source_set_id"],
            ["volume_sets.id"],
            name=op.f("fk_transfers_source_set_id_volume_sets"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_transfers")),
    )
    with op.batch_alter_table("transfers", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_transfers_dest_set_id"), ["dest_set_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_transfers_source_set_id"), ["source_set_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_transfers_state"), ["state"], unique=False)

    op.create_table(
        "transfer_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("transfer_id", sa.String(length=36), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=True),
        sa.Column("to_state", sa.String(length=16), nullable=True),
        sa.Column("detail", sa.String(length=4096), nullable=False),
        sa.ForeignKeyConstraint(
            ["transfer_id"],
            ["transfers.id"],
            name=op.f("fk_transfer_events_transfer_id_transfers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_transfer_events")),
    )
    with op.batch_alter_table("transfer_events", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_transfer_events_transfer_id"), ["transfer_id"], unique=False
        )

    op.create_table(
        "transfer_legs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("transfer_id", sa.String(length=36), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("source_volume_id", sa.Integer(), nullable=False),
        sa.Column("dest_volume_id", sa.Integer(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("streams", sa.Integer(), nullable=False),
        sa.Column("link_ids", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(
            ["dest_volume_id"],
            ["agent_volumes.id"],
            name=op.f("fk_transfer_legs_dest_volume_id_agent_volumes"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["source_volume_id"],
            ["agent_volumes.id"],
            name=op.f("fk_transfer_legs_source_volume_id_agent_volumes"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["transfer_id"],
            ["transfers.id"],
            name=op.f("fk_transfer_legs_transfer_id_transfers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_transfer_legs")),
        sa.UniqueConstraint(
            "transfer_id", "index", name=op.f("uq_transfer_legs_transfer_id_index")
        ),
    )
    with op.batch_alter_table("transfer_legs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_transfer_legs_dest_volume_id"), ["dest_volume_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_transfer_legs_source_volume_id"), ["source_volume_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_transfer_legs_transfer_id"), ["transfer_id"], unique=False
        )

    op.create_table(
        "transfer_paths",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("transfer_id", sa.String(length=36), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("link_id", sa.String(length=36), nullable=False),
        sa.ForeignKeyConstraint(
            ["link_id"],
            ["links.id"],
            name=op.f("fk_transfer_paths_link_id_links"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["transfer_id"],
            ["transfers.id"],
            name=op.f("fk_transfer_paths_transfer_id_transfers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_transfer_paths")),
        sa.UniqueConstraint(
            "transfer_id", "position", name=op.f("uq_transfer_paths_transfer_id_position")
        ),
    )
    with op.batch_alter_table("transfer_paths", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_transfer_paths_link_id"), ["link_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_transfer_paths_transfer_id"), ["transfer_id"], unique=False
        )

    op.create_table(
        "volume_set_members",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("volume_set_id", sa.String(length=36), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("volume_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["volume_id"],
            ["agent_volumes.id"],
            name=op.f("fk_volume_set_members_volume_id_agent_volumes"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["volume_set_id"],
            ["volume_sets.id"],
            name=op.f("fk_volume_set_members_volume_set_id_volume_sets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_volume_set_members")),
        sa.UniqueConstraint(
            "volume_set_id", "position", name=op.f("uq_volume_set_members_volume_set_id_position")
        ),
    )
    with op.batch_alter_table("volume_set_members", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_volume_set_members_volume_id"), ["volume_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_volume_set_members_volume_set_id"), ["volume_set_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("volume_set_members", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_volume_set_members_volume_set_id"))
        batch_op.drop_index(batch_op.f("ix_volume_set_members_volume_id"))

    op.drop_table("volume_set_members")
    with op.batch_alter_table("transfer_paths", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_transfer_paths_transfer_id"))
        batch_op.drop_index(batch_op.f("ix_transfer_paths_link_id"))

    op.drop_table("transfer_paths")
    with op.batch_alter_table("transfer_legs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_transfer_legs_transfer_id"))
        batch_op.drop_index(batch_op.f("ix_transfer_legs_source_volume_id"))
        batch_op.drop_index(batch_op.f("ix_transfer_legs_dest_volume_id"))

    op.drop_table("transfer_legs")
    with op.batch_alter_table("transfer_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_transfer_events_transfer_id"))

    op.drop_table("transfer_events")
    with op.batch_alter_table("transfers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_transfers_state"))
        batch_op.drop_index(batch_op.f("ix_transfers_source_set_id"))
        batch_op.drop_index(batch_op.f("ix_transfers_dest_set_id"))

    op.drop_table("transfers")
    with op.batch_alter_table("links", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_links_agent_b_id"))
        batch_op.drop_index(batch_op.f("ix_links_agent_a_id"))

    op.drop_table("links")
    with op.batch_alter_table("agent_volumes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_agent_volumes_agent_id"))

    op.drop_table("agent_volumes")
    with op.batch_alter_table("agent_nics", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_agent_nics_agent_id"))

    op.drop_table("agent_nics")
    op.drop_table("volume_sets")
    op.drop_table("agents")
