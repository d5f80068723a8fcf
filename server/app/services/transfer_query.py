"""Listing transfers a page at a time, by state, label, agent and creation time; and
changing their labels.

Pages are in creation order (oldest first, or newest first with ``order=desc``),
``limit`` at a time; a page that is not
the last comes with a cursor for the next (opaque to clients: the creation time and
id of its last transfer, so transfers created meanwhile neither shift nor repeat what
follows). Filters combine with AND: several ``state`` values match any of them,
several ``label`` values must all match.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import ColumnElement, Select, and_, or_, select
from sqlalchemy.orm import Session

from reservoir.server.app.services import labels, pages
from reservoir.server.app.tables import (
    Agent,
    AgentVolume,
    Transfer,
    TransferLabel,
    VolumeSetMember,
    utcnow,
)

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "TransferFilter", "page", "patch_labels", "set_labels"]

DEFAULT_LIMIT = pages.DEFAULT_LIMIT
MAX_LIMIT = pages.MAX_LIMIT


@dataclass
class TransferFilter:
    """What a listing asks for; every field optional."""

    states: Sequence[str] = ()
    labels: Sequence[str] = ()  # "key=value", or "key" for any value
    agent: str | None = None  # id or name: a member of its source or destination set
    created_after: datetime | None = None
    created_before: datetime | None = None
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None
    order: Literal["asc", "desc"] = "asc"  # oldest first, or newest first


def page(session: Session, want: TransferFilter) -> pages.Page[Transfer]:
    """One page of the transfers ``want`` names, and the cursor of the next if any."""
    return pages.page(
        session,
        _filtered(select(Transfer), session, want),
        Transfer.created_at,
        Transfer.id,
        limit=want.limit,
        cursor=want.cursor,
        newest_first=want.order == "desc",
    )


def _filtered(query: Select[Transfer], session: Session, want: TransferFilter) -> Select[Transfer]:
    if want.states:
        query = query.where(Transfer.state.in_(list(want.states)))
    query = labels.matching(
        query,
        want.labels,
        lambda key: and_(TransferLabel.transfer_id == Transfer.id, TransferLabel.key == key),
        lambda value: TransferLabel.value == value,
    )
    if want.agent is not None:
        query = query.where(_with_agent(session, want.agent))
    if want.created_after is not None:
        query = query.where(Transfer.created_at >= want.created_after)
    if want.created_before is not None:
        query = query.where(Transfer.created_at < want.created_before)
    return query


def _with_agent(session: Session, agent: str) -> ColumnElement[bool]:
    """Transfers with a member of either set on ``agent`` (its id or its name)."""
    agent_id = session.scalar(select(Agent.id).where(or_(Agent.id == agent, Agent.name == agent)))
    on_agent = (
        select(VolumeSetMember.volume_set_id)
        .join(AgentVolume, AgentVolume.id == VolumeSetMember.volume_id)
        .where(AgentVolume.agent_id == (agent_id or ""))
    )
    return or_(Transfer.source_set_id.in_(on_agent), Transfer.dest_set_id.in_(on_agent))


def set_labels(transfer: Transfer, given: dict[str, str]) -> None:
    """Makes ``given`` the transfer's labels."""
    labels.sync(transfer.label_rows, given, _row)


def patch_labels(transfer: Transfer, patch: dict[str, str | None], limit: int) -> None:
    """Merges ``patch`` into the transfer's labels (None removes one); 422 past ``limit``."""
    labels.sync(
        transfer.label_rows, labels.patched(transfer.labels, patch, limit, "a transfer"), _row
    )
    transfer.updated_at = utcnow()


def _row(key: str, value: str) -> TransferLabel:
    return TransferLabel(key=key, value=value)
