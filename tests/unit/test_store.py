"""The one atomic writer (reservoir.common.store): old or new file, never half of one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from reservoir.common import store
from reservoir.common.store import read_json, write_atomic, write_json_atomic


def test_a_failed_rename_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ck.json"
    write_atomic(path, b"old")

    def broken(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["ck.json"]


@pytest.mark.parametrize(("mode", "durable"), [(0o600, True), (0o644, False)])
def test_the_file_has_the_mode_asked_durable_or_not(
    tmp_path: Path, mode: int, durable: bool
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"before")
    os.chmod(path, 0o666)
    write_atomic(path, b"after", mode=mode, durable=durable)
    assert path.read_bytes() == b"after"
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_json_goes_into_a_private_folder_it_makes(tmp_path: Path) -> None:
    path = tmp_path / "state" / "copy.json"
    write_json_atomic(path, {"b": 1, "a": [2]})
    assert read_json(path) == {"a": [2], "b": 1}
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_marked_tells_our_files_from_an_operators(tmp_path: Path) -> None:
    mark = "# written by reservoir"
    ours, theirs, link = tmp_path / "ours", tmp_path / "theirs", tmp_path / "link"
    ours.write_text(f"{mark}\nkey = 1\n")
    theirs.write_text("key = 2\n")
    link.symlink_to(ours)
    assert store.marked(ours, mark) is True
    assert store.marked(theirs, mark) is False
    assert store.marked(link, mark) is False  # a link is the operator's, whatever it names
    assert store.marked(tmp_path / "none", mark) is None
