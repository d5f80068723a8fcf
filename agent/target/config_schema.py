"""The declared schema of a target file: every table, key and type it may hold.

Unknown keys are refused (a misspelt ``read_onyl`` must not leave a LUN
read-write), and types are strict (``direct = "false"`` is not true, and
``allow = "iqn..."`` is not a list of characters). :func:`check` returns the
validated tables or raises :class:`SchemaError` with one line per problem,
each naming the key path (``target[0].lun[1].direct``) and what was expected,
never the value (it may be a secret).
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reservoir.agent.target.errors import TargetError

__all__ = [
    "ChapTable",
    "LunTable",
    "SchemaError",
    "ServerTable",
    "TargetFile",
    "TargetTable",
    "check",
]


class SchemaError(TargetError):
    """A file that does not match the schema; ``problems`` has one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ChapTable(_Table):
    user: str
    secret: str


class LunTable(_Table):
    id: int
    path: str
    read_only: bool = False
    direct: bool = False
    bulk_writes: Literal["direct", "cached"] = "direct"


class TargetTable(_Table):
    iqn: str
    alias: str | None = None
    open: bool = False  # every initiator may log in, without ACL or CHAP: said explicitly
    allow: list[str] = Field(default_factory=list)
    chap: ChapTable | None = None
    mutual_chap: ChapTable | None = None
    lun: list[LunTable] = Field(default_factory=list)


class ServerTable(_Table):
    portals: list[str] = Field(default_factory=list)
    login_timeout: float = Field(default=15.0, gt=0)  # seconds a login may take
    max_pending_logins: int = Field(default=256, ge=1)  # connections still in login
    max_pending_logins_per_address: int = Field(default=64, ge=1)  # ... from one address


class TargetFile(_Table):
    server: ServerTable = Field(default_factory=ServerTable)
    target: list[TargetTable] = Field(default_factory=list)


def check(data: dict[str, Any]) -> TargetFile:
    """``data`` (a parsed TOML document) validated against the schema."""
    try:
        return TargetFile.model_validate(data)
    except ValidationError as exc:
        raise SchemaError([_problem(err) for err in exc.errors(include_url=False)]) from None


def _problem(err: Any) -> str:
    loc: tuple[str | int, ...] = tuple(err["loc"])
    return f"{key_path(loc)}: {_expected(err, loc)}"


def key_path(loc: tuple[str | int, ...]) -> str:
    """``("target", 0, "lun", 1, "direct")`` -> ``target[0].lun[1].direct``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else part
    return out or "(the file)"


_EXPECTED = {
    "bool_type": "expected true or false",
    "int_type": "expected an integer",
    "float_type": "expected a number",
    "string_type": "expected a string",
    "list_type": "expected an array",
    "model_type": "expected a table",
    "dict_type": "expected a table",
}


def _expected(err: Any, loc: tuple[str | int, ...]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        keys = _keys_at(loc[:-1])
        return "unknown key" + (f" (expected one of: {', '.join(keys)})" if keys else "")
    if kind == "missing":
        return "missing (a required key)"
    if kind in _EXPECTED:
        return f"{_EXPECTED[kind]}, got {_toml_type(err.get('input'))}"
    return str(err["msg"])


def _toml_type(value: object) -> str:
    """What a value is, in TOML's words; never the value itself."""
    for python, toml in (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a float"),
        (str, "a string"),
        (list, "an array"),
        (dict, "a table"),
    ):
        if isinstance(value, python):
            return toml
    return "a date or time"


def _keys_at(loc: tuple[str | int, ...]) -> list[str]:
    """The keys the schema allows in the table at ``loc``."""
    model: type[BaseModel] | None = TargetFile
    for part in loc:
        if model is None:
            return []
        if isinstance(part, str):
            field = model.model_fields.get(part)
            model = None if field is None else _table_of(field.annotation)
    return list(model.model_fields) if model is not None else []


def _table_of(annotation: Any) -> type[BaseModel] | None:
    """The table model inside ``X``, ``list[X]`` or ``X | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (list, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _table_of(arg)
            if found is not None:
                return found
    return None
