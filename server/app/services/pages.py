"""Lists a page at a time: ``limit`` items in creation order (or newest first), and a
cursor for the next page (the creation time and id of the last item shown: opaque to
clients, and stable while items are created meanwhile). The routes answer with
``Link: <URL>; rel="next"`` and ``X-Next-Cursor`` when there is a next page."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import Select, and_, or_
from sqlalchemy.orm import InstrumentedAttribute, Session
from starlette.requests import Request
from starlette.responses import Response

from reservoir.server.app.errors import InvalidRequestError

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "Page",
    "decode_cursor",
    "encode_cursor",
    "link_next",
    "page",
]

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
T = TypeVar("T")


@dataclass
class Page(Generic[T]):
    items: list[T] = field(default_factory=list)
    next_cursor: str | None = None


def page(
    session: Session,
    query: Select[T],
    at: InstrumentedAttribute[datetime],
    ident: InstrumentedAttribute[str],
    *,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
    newest_first: bool = False,
) -> Page[T]:
    """One page of ``query`` ordered by (``at``, ``ident``), after ``cursor``."""
    if cursor is not None:
        when, last = decode_cursor(cursor)
        if newest_first:
            query = query.where(or_(at < when, and_(at == when, ident < last)))
        else:
            query = query.where(or_(at > when, and_(at == when, ident > last)))
    order = (at.desc(), ident.desc()) if newest_first else (at.asc(), ident.asc())
    rows: list[Any] = list(session.scalars(query.order_by(*order).limit(limit + 1)))
    if len(rows) <= limit:
        return Page(rows)
    shown = rows[:limit]
    last_row = shown[-1]
    return Page(shown, encode_cursor(getattr(last_row, at.key), getattr(last_row, ident.key)))


def encode_cursor(at: datetime, ident: str) -> str:
    raw = json.dumps([at.isoformat(), ident], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The creation time and id a cursor names; 422 for one this coordinator did not make."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, ident = json.loads(raw)
        when = datetime.fromisoformat(at)
        if not isinstance(ident, str) or when.tzinfo is None:
            raise ValueError("not a cursor")
    except (ValueError, TypeError, binascii.Error, json.JSONDecodeError):
        raise InvalidRequestError(
            ("query", "cursor"), "not a cursor of this listing (take it from a page's Link)"
        ) from None
    return when, ident


def link_next(request: Request, response: Response, next_cursor: str | None) -> None:
    """The headers naming the next page, if there is one."""
    if next_cursor is None:
        return
    following = request.url.include_query_params(cursor=next_cursor)
    response.headers["Link"] = f'<{following}>; rel="next"'
    response.headers["X-Next-Cursor"] = next_cursor
