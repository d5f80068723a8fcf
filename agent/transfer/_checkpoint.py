"""Copy checkpoints: the plan parameters and the digest of every completed extent.

A JSON file saved atomically (temp file with mode 0600 in the same folder, fsync,
rename, fsync of the folder), at most every ``interval`` seconds and at the end.
``--resume`` loads it, refuses it when it belongs to another copy, and skips the
extents it lists.  ``in_flight`` records the extents being sent at the last save, to
count what a resume sends twice.  ``source_mark`` is what told the source's changes
when the run that saved it began (:class:`ChangeMark`), or when the done extents
were last found equal to it: a resume whose source has moved since takes none of the
done extents on the checkpoint's word (where it can be, the source is hashed again
to sort them: :mod:`._source_watch`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reservoir.agent.storage import ChangeMark
from reservoir.agent.transfer._errors import CopyError
from reservoir.common.store import write_atomic

VERSION = 1
SAVE_INTERVAL = 0.5


class CheckpointError(CopyError):
    """The checkpoint cannot be used (unreadable, or for another copy)."""


@dataclass(frozen=True, slots=True)
class CopyKey:
    """What identifies a copy: a checkpoint only resumes the same one."""

    source: str
    dest: str
    offset: int
    length: int
    extent_size: int
    stripe_unit: int = 0  # several destinations: the level-1 stripe unit

    def digest(self) -> str:
        text = f"{self.source}\n{self.dest}\n{self.offset}:{self.length}"
        if self.stripe_unit:
            text += f"\n{self.stripe_unit}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_path(key: CopyKey) -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "reservoir" / f"copy-{key.digest()}.json"


@dataclass
class Checkpoint:
    path: Path
    key: CopyKey
    done: dict[int, bytes] = field(default_factory=dict)
    in_flight: set[int] = field(default_factory=set)
    source_mark: ChangeMark | None = None  # the source's, as the saving run began
    interval: float = SAVE_INTERVAL
    _saved_at: float | None = None  # monotonic time of the last save; None: never

    def watch_source(self, mark: ChangeMark | None) -> int:
        """Keeps ``mark`` (the source's now) and returns how many done extents went
        back in flight because the source moved since the mark of the run that saved
        them: they are looked for on the destination again, and the ones that differ
        from the source as it is now are sent. 0 where either mark is missing (a
        remote source, or a checkpoint from before marks were kept)."""
        earlier, self.source_mark = self.source_mark, mark
        if earlier is None or mark is None or not earlier.moved(mark):
            return 0
        moved = len(self.done)
        self.in_flight |= set(self.done)
        self.done.clear()
        return moved

    def forget(self, extents: set[int], mark: ChangeMark) -> None:
        """``extents`` are no longer done (the source differs from what was sent
        there), and the rest were found equal to the source while its mark was
        ``mark``: a resume from this mark sends ``extents`` and skips the rest."""
        for extent_id in extents:
            self.done.pop(extent_id, None)
        self.source_mark = mark

    def record(self, extent_id: int, digest: bytes) -> None:
        self.done[extent_id] = digest
        self.in_flight.discard(extent_id)
        self.save_if_due()

    def save_if_due(self) -> None:
        if self._saved_at is None or time.monotonic() - self._saved_at >= self.interval:
            self.save()

    def save(self) -> None:
        self._saved_at = time.monotonic()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(self.to_json(), indent=1).encode())

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "source": self.key.source,
            "dest": self.key.dest,
            "offset": self.key.offset,
            "length": self.key.length,
            "extent_size": self.key.extent_size,
            "stripe_unit": self.key.stripe_unit,
            "done": {str(i): d.hex() for i, d in sorted(self.done.items())},
            "in_flight": sorted(self.in_flight),
            "source_mark": _mark_json(self.source_mark),
        }


def load(path: Path, key: CopyKey) -> Checkpoint:
    """Reads ``path``; raises CheckpointError unless it is a checkpoint of ``key``."""
    try:
        data = json.loads(path.read_text())
        found = CopyKey(
            data["source"],
            data["dest"],
            data["offset"],
            data["length"],
            data["extent_size"],
            data.get("stripe_unit", 0),
        )
        done = {int(i): bytes.fromhex(d) for i, d in data["done"].items()}
        in_flight = {int(i) for i in data.get("in_flight", [])}
        mark = data.get("source_mark")
        source_mark = None if mark is None else ChangeMark(str(mark[0]), str(mark[1]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    if found != key:
        raise CheckpointError(f"checkpoint {path} is for another copy: {_diff(found, key)}")
    return Checkpoint(path, key, done, in_flight, source_mark)


def _mark_json(mark: ChangeMark | None) -> list[str] | None:
    return None if mark is None else [mark.how, mark.state]


def _diff(found: CopyKey, wanted: CopyKey) -> str:
    names = ("source", "dest", "offset", "length", "extent_size", "stripe_unit")
    parts = [
        f"{n} {getattr(found, n)!r} (not {getattr(wanted, n)!r})"
        for n in names
        if getattr(found, n) != getattr(wanted, n)
    ]
    return ", ".join(parts)
