"""Copy checkpoints: round trip, atomic 0600 saves, refusal of another copy's file."""

from __future__ import annotations

import dataclasses
import json
import stat
from pathlib import Path
from typing import Any

import pytest

from reservoir.agent.storage import ChangeMark
from reservoir.agent.transfer import Checkpoint, CheckpointError, CopyKey
from reservoir.agent.transfer import _checkpoint as ck

KEY = CopyKey("/src.img", "iscsi://h:3260/iqn.x:t/0", 0, 64 << 20, 8 << 20)


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "ck.json"
    saved = Checkpoint(path, KEY, in_flight={4, 5})
    saved.record(0, bytes(range(16)))
    saved.record(3, b"\xff" * 16)
    saved.save()
    loaded = ck.load(path, KEY)
    assert loaded.done == {0: bytes(range(16)), 3: b"\xff" * 16}
    assert loaded.in_flight == {4, 5}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["ck.json"]  # no temp file left


def test_saves_at_most_every_interval(tmp_path: Path) -> None:
    path = tmp_path / "ck.json"
    checkpoint = Checkpoint(path, KEY, interval=3600)
    checkpoint.record(0, bytes(16))  # the first record saves
    checkpoint.record(1, bytes(16))
    assert list(json.loads(path.read_text())["done"]) == ["0"]
    checkpoint.save()
    assert list(json.loads(path.read_text())["done"]) == ["0", "1"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("source", "/other.img"), ("dest", "/x"), ("offset", 512), ("extent_size", 1 << 20)],
)
def test_refuses_another_copy(tmp_path: Path, field: str, value: Any) -> None:
    path = tmp_path / "ck.json"
    Checkpoint(path, KEY).save()
    other = dataclasses.replace(KEY, **{field: value})
    with pytest.raises(CheckpointError, match=f"another copy: {field}"):
        ck.load(path, other)


def test_refuses_garbage(tmp_path: Path) -> None:
    path = tmp_path / "ck.json"
    path.write_text("{not json")
    with pytest.raises(CheckpointError, match="cannot read"):
        ck.load(path, KEY)


def test_default_path_depends_on_source_dest_and_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", "/state")
    path = ck.default_path(KEY)
    assert path.parent == Path("/state/reservoir") and path.name.startswith("copy-")
    assert ck.default_path(CopyKey("/src.img", KEY.dest, 512, KEY.length, KEY.extent_size)) != path


MARK = ChangeMark("its modification and change times", "2049:12 67108864 1 1")


def test_the_source_mark_is_saved_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "ck.json"
    saved = Checkpoint(path, KEY)
    assert saved.watch_source(MARK) == 0  # a fresh copy: nothing to distrust
    saved.save()
    assert ck.load(path, KEY).source_mark == MARK


def test_a_checkpoint_saved_before_marks_were_kept_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "ck.json"
    Checkpoint(path, KEY, done={0: bytes(16)}).save()
    data = json.loads(path.read_text())
    del data["source_mark"]
    path.write_text(json.dumps(data))
    loaded = ck.load(path, KEY)
    assert loaded.source_mark is None and loaded.done == {0: bytes(16)}
    assert loaded.watch_source(MARK) == 0 and loaded.done == {0: bytes(16)}


def test_a_source_that_moved_since_puts_the_done_extents_back_in_flight(tmp_path: Path) -> None:
    checkpoint = Checkpoint(tmp_path / "ck.json", KEY, done={0: bytes(16), 2: bytes(16)})
    checkpoint.in_flight = {3}
    checkpoint.source_mark = MARK
    assert checkpoint.watch_source(MARK) == 0 and set(checkpoint.done) == {0, 2}
    moved = dataclasses.replace(MARK, state="2049:12 67108864 2 2")
    assert checkpoint.watch_source(moved) == 2
    assert checkpoint.done == {} and checkpoint.in_flight == {0, 2, 3}
    assert checkpoint.source_mark == moved


def test_a_mark_that_is_unreadable_refuses_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "ck.json"
    Checkpoint(path, KEY).save()
    data = json.loads(path.read_text())
    data["source_mark"] = ["only one"]
    path.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        ck.load(path, KEY)
