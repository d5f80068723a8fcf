"""The state file: the values a namespace had before any profile changed them.

One JSON file per network namespace, ``<state dir>/netns-<inode>.json`` (the
inode of ``/proc/self/ns/net``; /run is shared by every namespace), written
atomically (temp file 0600, fsync, rename, fsync of the directory) and only
under an exclusive ``flock`` of ``netns-<inode>.lock``, so two agents tuning at
once cannot lose each other's originals. An entry, once recorded, is never
overwritten by a later apply: it is the value from before the first profile.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reservoir.agent.tuning._errors import TuningError
from reservoir.common import store

STATE_DIR = Path("/run/reservoir-tuning")
STATE_VERSION = 1

# scope, interface ("" for sysctl), name
EntryKey = tuple[str, str, str]


class StateError(TuningError):
    """A state file that cannot be read or written."""


@dataclass(frozen=True)
class Entry:
    """One original value: ``scope`` sysctl | link | coalesce."""

    scope: str
    name: str
    value: str
    interface: str = ""
    ifindex: int | None = None

    @property
    def key(self) -> EntryKey:
        return (self.scope, self.interface, self.name)


@dataclass
class Saved:
    profiles: list[str] = field(default_factory=list)
    entries: dict[EntryKey, Entry] = field(default_factory=dict)

    def to_dict(self, netns: int) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "netns": netns,
            "profiles": self.profiles,
            "original": [
                {
                    "scope": e.scope,
                    "interface": e.interface or None,
                    "ifindex": e.ifindex,
                    "name": e.name,
                    "value": e.value,
                }
                for e in self.entries.values()
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Saved:
        entries = {}
        for raw in data["original"]:
            e = Entry(
                scope=str(raw["scope"]),
                name=str(raw["name"]),
                value=str(raw["value"]),
                interface=str(raw.get("interface") or ""),
                ifindex=None if raw.get("ifindex") is None else int(raw["ifindex"]),
            )
            entries[e.key] = e
        return cls([str(p) for p in data.get("profiles", [])], entries)


def state_path(state_dir: Path, netns: int) -> Path:
    return state_dir / f"netns-{netns}.json"


def read_state(path: Path) -> Saved | None:
    """The recorded originals, or None if nothing is applied."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StateError(f"cannot read {path}: {e.strerror}") from e
    try:
        data = json.loads(text)
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {STATE_VERSION}")
        return Saved.from_dict(data)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise StateError(f"{path} is not a tuning state file: {e}") from e


def write_state(path: Path, saved: Saved, netns: int) -> None:
    """Written atomically (:func:`reservoir.common.store.write_json_atomic`); the file
    is removed instead when nothing is left to restore."""
    if not saved.entries:
        path.unlink(missing_ok=True)
        store.fsync_dir(path.parent)
        return
    store.write_json_atomic(path, saved.to_dict(netns))


@contextmanager
def locked(state_dir: Path, netns: int) -> Iterator[None]:
    """Exclusive use of this namespace's state file while held."""
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(state_dir / f"netns-{netns}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise StateError(f"cannot use state directory {state_dir}: {e.strerror}") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
