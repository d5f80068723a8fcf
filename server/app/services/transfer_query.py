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

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from sqlalchemy import ColumnElement, Select, and_, exists, or_, select
from sqlalchemy.orm import Session

from reservoir.server.app.errors import InvalidRequestError
from reservoir.server.app.tables import (
    Agent,
    AgentVolume,
    Transfer,
    TransferLabel,
    VolumeSetMember,
    utcnow,
)

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "Page", "TransferFilter", "page", "patch_labels"]

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


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


@dataclass
class Page:
    transfers: list[Transfer] = field(default_factory=list)
    next_cursor: str | None = None


def page(session: Session, want: TransferFilter) -> Page:
    """One page of the transfers ``want`` names, and the cursor of the next if any."""
    query = _filtered(select(Transfer), session, want)
    newest_first = want.order == "desc"
    if want.cursor is not None:
        at, last_id = decode_cursor(want.cursor)
        if newest_first:
            after = or_(
                Transfer.created_at < at, and_(Transfer.created_at == at, Transfer.id < last_id)
            )
        else:
            after = or_(
                Transfer.created_at > at, and_(Transfer.created_at == at, Transfer.id > last_id)
            )
        query = query.where(after)
    if newest_first:
        query = query.order_by(Transfer.created_at.desc(), Transfer.id.desc())
    else:
        query = query.order_by(Transfer.created_at, Transfer.id)
    rows = list(session.scalars(query.limit(want.limit + 1)))
    if len(rows) <= want.limit:
        return Page(rows)
    shown = rows[: want.limit]
    return Page(shown, encode_cursor(shown[-1]))


def _filtered(query: Select[Transfer], session: Session, want: TransferFilter) -> Select[Transfer]:
    if want.states:
        query = query.where(Transfer.state.in_(list(want.states)))
    for label in want.labels:
        key, has_value, value = label.partition("=")
        mine = and_(TransferLabel.transfer_id == Transfer.id, TransferLabel.key == key)
        if has_value:
            mine = and_(mine, TransferLabel.value == value)
        query = query.where(exists().where(mine))
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


def encode_cursor(last: Transfer) -> str:
    raw = json.dumps([last.created_at.isoformat(), last.id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The creation time and id a cursor names; 422 for one this coordinator did not make."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, last_id = json.loads(raw)
        when = datetime.fromisoformat(at)
        if not isinstance(last_id, str) or when.tzinfo is None:
            raise ValueError("not a cursor")
    except (ValueError, TypeError, binascii.Error, json.JSONDecodeError):
        raise InvalidRequestError(
            ("query", "cursor"), "not a cursor of this listing (take it from a page's Link)"
        ) from None
    return when, last_id


def set_labels(transfer: Transfer, labels: dict[str, str]) -> None:
    """Makes ``labels`` the transfer's labels."""
    transfer.label_rows = [TransferLabel(key=k, value=v) for k, v in sorted(labels.items())]


def patch_labels(transfer: Transfer, patch: dict[str, str | None], limit: int) -> None:
    """Merges ``patch`` into the transfer's labels (None removes one); 422 past ``limit``."""
    labels = transfer.labels
    for key, value in patch.items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    if len(labels) > limit:
        raise InvalidRequestError(("labels",), f"a transfer has {limit} labels at most")
    current = {row.key: row for row in transfer.label_rows}
    for key in list(current):
        if key not in labels:
            transfer.label_rows.remove(current[key])
    for key, value in labels.items():
        if key in current:
            current[key].value = value
        else:
            transfer.label_rows.append(TransferLabel(key=key, value=value))
    transfer.updated_at = utcnow()
