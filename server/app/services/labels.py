"""Labels (``key=value``) of transfers and agents: set at creation, changed by a JSON
merge patch, listed by (``label=key=value`` or ``label=key``, all must match)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from sqlalchemy import ColumnElement, Select, and_, exists

from reservoir.server.app.errors import InvalidRequestError

__all__ = ["LabelRow", "matching", "patched", "sync"]


class LabelRow(Protocol):
    key: Any
    value: Any


R = TypeVar("R", bound=LabelRow)
Q = TypeVar("Q")


def patched(
    current: dict[str, str], patch: dict[str, str | None], limit: int, owner: str
) -> dict[str, str]:
    """``current`` with ``patch`` merged in (None removes a label); 422 past ``limit``."""
    labels = dict(current)
    for key, value in patch.items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    if len(labels) > limit:
        raise InvalidRequestError(("labels",), f"{owner} has {limit} labels at most")
    return labels


def sync(rows: list[R], labels: dict[str, str], make: Callable[[str, str], R]) -> None:
    """Makes ``rows`` (an owner's label rows, changed in place) say ``labels``."""
    current = {row.key: row for row in rows}
    for key, row in current.items():
        if key not in labels:
            rows.remove(row)
    for key, value in sorted(labels.items()):
        if key in current:
            current[key].value = value
        else:
            rows.append(make(key, value))


def matching(
    query: Select[Q],
    texts: Sequence[str],
    owned: Callable[[str], ColumnElement[bool]],
    value_of: Callable[[str], ColumnElement[bool]],
) -> Select[Q]:
    """``query`` restricted to owners with every label of ``texts`` (``key=value``, or
    ``key`` for any value): ``owned(key)`` is the label row of the owner with that key,
    ``value_of(value)`` its value's test."""
    for text in texts:
        key, has_value, value = text.partition("=")
        mine = owned(key)
        if has_value:
            mine = and_(mine, value_of(value))
        query = query.where(exists().where(mine))
    return query
