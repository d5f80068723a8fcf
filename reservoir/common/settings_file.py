"""A settings file: a TOML file that holds one table (``[agent]``, ``[server]``) whose
keys a pydantic model declares.

:func:`read_table` refuses a file that holds anything beside its table (``[agnet]`` next
to ``[agent]`` is a typo, not a comment); :func:`describe` turns the model's
:class:`~pydantic.ValidationError` into one line per problem, each with its key path
(``agent.max_running``), what was expected and the TOML type that was given. No message
shows a value: a settings file holds tokens.
"""

from __future__ import annotations

import datetime
import re
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from reservoir.common.errors import ReservoirError

__all__ = ["SettingsFileError", "describe", "read_table", "toml_type"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class SettingsFileError(ReservoirError):
    """A settings file that cannot be used: the file, then each problem."""

    def __init__(self, path: Path, problems: Sequence[str]) -> None:
        self.path = path
        self.problems = list(problems)
        if len(self.problems) == 1:
            text = f"{path}: {self.problems[0]}"
        else:
            text = f"{path}: {len(self.problems)} problems:" + "".join(
                f"\n  {p}" for p in self.problems
            )
        super().__init__(text)


def read_table(path: Path, table: str) -> dict[str, Any]:
    """The ``[table]`` of ``path``; :class:`SettingsFileError` if the file cannot be
    read, is not TOML, has no such table or holds anything else."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SettingsFileError(path, [f"cannot read: {exc.strerror or exc}"]) from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SettingsFileError(path, [f"not valid TOML: {exc}"]) from None
    problems = [_stranger(key, value, table) for key, value in data.items() if key != table]
    found = data.get(table)
    if not isinstance(found, dict):
        problems.insert(0, f"no [{table}] table")
    if problems or not isinstance(found, dict):
        raise SettingsFileError(path, problems)
    return found


def _stranger(key: str, value: object, table: str) -> str:
    if isinstance(value, dict):
        what = f"[{_key(key)}]: unknown table"
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        what = f"[[{_key(key)}]]: unknown table"
    else:
        what = f"{_key(key)}: unknown key outside [{table}]"
    return f"{what} (the file holds only the [{table}] table)"


def describe(exc: ValidationError, table: str, keys: Iterable[str]) -> list[str]:
    """One line per problem of ``exc`` raised on ``table``, whose known keys are
    ``keys``: ``agent.nic_pacing: must be a boolean, got a string``."""
    known = ", ".join(sorted(keys))
    return [_problem(err, table, known) for err in exc.errors()]


def _problem(err: ErrorDetails, table: str, known: str) -> str:
    where = table + "".join(f"[{p}]" if isinstance(p, int) else f".{_key(p)}" for p in err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{where}: unknown key (expected one of {known})"
    if kind == "missing":
        return f"{where}: Field required"
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "path_type":
        msg = "Input should be a path (a string)"
    if kind.endswith("_type"):
        msg = f"{msg}, got {toml_type(err.get('input'))}"
    return f"{where}: {msg}"


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else f'"{key}"'


def toml_type(value: object) -> str:
    """The TOML type of a parsed value, in words (``a string``); never the value."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, datetime.date | datetime.time):
        return "a date or time"
    return type(value).__name__
