"""A target file as its administrator wrote it, edited in place by ``reservoir target``.

The file is kept as a tomlkit document, so an edit changes the keys it is about
and leaves every comment, blank line and indentation alone. A file that cannot
be fully read (not TOML, or refused by the schema and :func:`config.validate`)
is never rewritten; an edit whose result would be refused is not saved.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, MutableMapping
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import AoT, Array, InlineTable

from reservoir.agent.target import config as cfg
from reservoir.common.store import write_atomic

__all__ = ["ConfigDocument"]


class ConfigDocument:
    def __init__(self, path: Path, document: tomlkit.TOMLDocument) -> None:
        self.path = path
        self.document = document

    @classmethod
    def read(cls, path: str | Path) -> ConfigDocument:
        """The file at ``path`` (an empty document if there is none), fully checked."""
        path = Path(path)
        if not path.exists():
            document = tomlkit.document()
            document["server"] = tomlkit.table()  # a new file starts with its portals
            return cls(path, document)
        data = cfg.read_toml(path)
        try:
            document = tomlkit.parse(path.read_text(encoding="utf-8"))
        except (tomlkit.exceptions.TOMLKitError, UnicodeDecodeError) as exc:
            raise cfg.ConfigError(f"{path}: cannot be edited in place: {exc}") from exc
        if document.unwrap() != data:
            raise cfg.ConfigError(f"{path}: cannot be edited in place; edit it by hand")
        edited = cls(path, document)
        edited.config  # noqa: B018 - refuses a file the schema refuses
        return edited

    @property
    def config(self) -> cfg.TargetConfig:
        """What the document says now, checked (:class:`cfg.ConfigError` if refused)."""
        try:
            return cfg.from_toml(self.document.unwrap())
        except cfg.ConfigError as exc:
            raise cfg.ConfigError(f"{self.path}: {exc}") from None

    def save(self) -> None:
        """Written atomically (0600) if what it says is accepted, and reads back as
        exactly that; else the file is left as it was."""
        self.config  # noqa: B018 - refuses to save what would not load
        text = tomlkit.dumps(self.document)
        try:
            same = tomllib.loads(text) == self.document.unwrap()
        except tomllib.TOMLDecodeError:
            same = False
        if not same:
            raise cfg.ConfigError(
                f"{self.path}: this edit cannot be written in the file's layout; edit it by hand"
            )
        write_atomic(self.path, text.encode())

    # ------------------------------------------------------------ server

    def add_portal(self, portal: tuple[str, int]) -> None:
        server = self._table(self.document, "server")
        server.setdefault("portals", tomlkit.array())
        server["portals"].append(cfg.format_portal(*portal))

    def remove_portal(self, portal: tuple[str, int]) -> None:
        server = self._table(self.document, "server")
        _remove_where(server, "portals", lambda text: cfg.parse_portal(str(text)) == portal)

    # ------------------------------------------------------------ targets

    def add_target(self, target: cfg.Target) -> None:
        _append_table(self.document, "target", target.to_toml())

    def remove_target(self, iqn: str) -> None:
        _remove_where(self.document, "target", lambda t: t["iqn"] == iqn)

    def add_lun(self, iqn: str, lun: cfg.Lun) -> None:
        _append_table(self._target(iqn), "lun", lun.to_toml())

    def remove_lun(self, iqn: str, lun_id: int) -> None:
        _remove_where(self._target(iqn), "lun", lambda lun: lun["id"] == lun_id)

    def allow(self, iqn: str, initiator: str) -> None:
        target = self._target(iqn)
        target.setdefault("allow", tomlkit.array())
        target["allow"].append(initiator)

    def disallow(self, iqn: str, initiator: str) -> None:
        _remove_where(self._target(iqn), "allow", lambda name: name == initiator)

    def set_chap(self, iqn: str, key: str, chap: cfg.Chap) -> None:
        target = self._target(iqn)
        existing = target.get(key)
        if isinstance(existing, MutableMapping):
            existing.update(chap.to_toml())  # a [target.chap] table stays one
        else:
            table = tomlkit.inline_table()
            table.update(chap.to_toml())
            target[key] = table

    def clear(self, iqn: str, keys: Iterable[str]) -> None:
        target = self._target(iqn)
        for key in keys:
            if key in target:
                del target[key]

    def set_open(self, iqn: str) -> None:
        self._target(iqn)["open"] = True

    # ------------------------------------------------------------ helpers

    def _target(self, iqn: str) -> MutableMapping[str, Any]:
        found: MutableMapping[str, Any] = next(
            t for t in self.document["target"] if t["iqn"] == iqn
        )
        return found

    @staticmethod
    def _table(parent: MutableMapping[str, Any], key: str) -> MutableMapping[str, Any]:
        if key not in parent:
            parent[key] = tomlkit.table()
        table: MutableMapping[str, Any] = parent[key]
        return table


def _append_table(parent: MutableMapping[str, Any], key: str, values: dict[str, Any]) -> None:
    """Appends a table to the array of tables ``parent[key]``, in the style it has:
    ``[[key]]`` sections, or inline tables in an array."""
    existing = parent.get(key)
    had_content = len(parent) > 0
    if isinstance(parent, InlineTable) or (isinstance(existing, Array) and len(existing) > 0):
        if existing is None:
            parent[key] = tomlkit.array()
            existing = parent[key]
        item: Any = tomlkit.inline_table()
        item.update(values)
        existing.append(item)
        return
    if not isinstance(existing, AoT):
        existing = tomlkit.aot()
        parent[key] = existing
        existing = parent[key]
    before: Any = existing[-1] if len(existing) > 0 else parent
    spaced = had_content and not before.as_string().endswith("\n\n")
    table = tomlkit.table()
    for name, value in values.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            for entry in value:
                _append_table(table, name, entry)
        else:
            table[name] = value
    if spaced:
        table.trivia.indent = "\n"  # a blank line before the new section
    existing.append(table)


def _remove_where(parent: MutableMapping[str, Any], key: str, matches: Any) -> None:
    """Removes the items of the array (or array of tables) ``parent[key]`` that match,
    and the key if none is left."""
    items = parent[key]
    for index in reversed(range(len(items))):
        if matches(items[index]):
            del items[index]
    if not len(items):
        del parent[key]
