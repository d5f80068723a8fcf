"""Field checks shared by the campaign parser: each appends one message naming its field
(``matrix.streams[2]: must be an integer between 1 and 256, got 0``) to ``errors`` and
returns None, so a file is checked whole and every problem is reported at once."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
Item = Callable[[str, Any, list[str]], T | None]

SIZE_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
SIZE_RE = re.compile(r"^([0-9]+)\s*(KiB|MiB|GiB|TiB)$")
MIN_SIZE, MAX_SIZE, SIZE_ALIGN = 1 << 20, 16 << 40, 4096


def at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def unknown_keys(
    where: str, table: dict[str, Any], allowed: Iterable[str], errors: list[str]
) -> None:
    expected = sorted(allowed)
    for key in sorted(set(table) - set(expected)):
        errors.append(f"{at(where, key)}: unknown field (expected {', '.join(expected)})")


def table(where: str, value: Any, errors: list[str]) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        errors.append(f"{where}: must be a table ([{where}])")
        return None
    return value


def integer(where: str, value: Any, lo: int, hi: int, errors: list[str]) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        errors.append(f"{where}: must be an integer between {lo} and {hi}, got {value!r}")
        return None
    return value


def number(
    where: str, value: Any, lo: float, hi: float, errors: list[str], *, above: bool = False
) -> float | None:
    """A number in [lo, hi], or in (lo, hi] with ``above``."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok and (lo < value <= hi if above else lo <= value <= hi):
        return float(value)
    bounds = f"greater than {lo:g} and at most {hi:g}" if above else f"between {lo:g} and {hi:g}"
    errors.append(f"{where}: must be a number {bounds}, got {value!r}")
    return None


def choice(where: str, value: Any, choices: Iterable[str], errors: list[str]) -> str | None:
    options = tuple(choices)
    if not isinstance(value, str) or value not in options:
        errors.append(f"{where}: must be one of {', '.join(options)}, got {value!r}")
        return None
    return value


def boolean(where: str, value: Any, errors: list[str]) -> bool | None:
    if not isinstance(value, bool):
        errors.append(f"{where}: must be true or false, got {value!r}")
        return None
    return value


def text(where: str, value: Any, errors: list[str]) -> str | None:
    if not isinstance(value, str) or not value.strip():
        errors.append(f"{where}: must be a non-empty string, got {value!r}")
        return None
    return value


def size(where: str, value: Any, errors: list[str]) -> int | None:
    """Bytes: an integer, or a string like ``"2GiB"`` (KiB, MiB, GiB, TiB)."""
    n: int | None = None
    if isinstance(value, str) and (m := SIZE_RE.match(value.strip())):
        n = int(m.group(1)) * SIZE_UNITS[m.group(2)]
    elif isinstance(value, int) and not isinstance(value, bool):
        n = value
    if n is None or not MIN_SIZE <= n <= MAX_SIZE or n % SIZE_ALIGN:
        errors.append(
            f'{where}: must be a size in bytes or like "2GiB" (KiB, MiB, GiB, TiB), between'
            f" 1MiB and 16TiB and a multiple of {SIZE_ALIGN} bytes, got {value!r}"
        )
        return None
    return n


def format_size(n: int) -> str:
    """``2GiB``, ``1536MiB``: the largest unit that divides ``n`` exactly."""
    for unit, factor in reversed(SIZE_UNITS.items()):
        if n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n}B"


def values(where: str, value: Any, item: Item[T], errors: list[str]) -> tuple[T, ...] | None:
    """A dimension: one value or a non-empty list of distinct values, each checked by
    ``item``; None if any of them is wrong."""
    single = not isinstance(value, list)
    items: list[Any] = [value] if single else value
    if not items:
        errors.append(f"{where}: must not be empty")
        return None
    out: list[T] = []
    for i, v in enumerate(items):
        checked = item(where if single else f"{where}[{i}]", v, errors)
        if checked is not None:
            out.append(checked)
    if len(out) != len(items):
        return None
    for i, v in enumerate(out):
        if v in out[:i]:
            errors.append(f"{where}[{i}]: {items[i]!r} appears twice")
            return None
    return tuple(out)
