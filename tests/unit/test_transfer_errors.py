"""What a copy reports as its own error (CopyError, one line for the user) and what it
lets through: a problem of the request is a CopyError, a bug is not."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from reservoir.agent.transfer import _engine
from reservoir.agent.transfer._engine import CopyOptions, copy
from reservoir.agent.transfer._errors import CopyError
from reservoir.agent.transfer._stream import StreamStats

SIZE = 1 << 20


def files(tmp_path: Path) -> tuple[str, str]:
    source, dest = tmp_path / "source", tmp_path / "dest"
    source.write_bytes(os.urandom(SIZE))
    dest.write_bytes(bytes(SIZE))
    return str(source), str(dest)


def options(tmp_path: Path, **changes: object) -> CopyOptions:
    base = CopyOptions(streams=2, extent_size=256 << 10, checkpoint=tmp_path / "ck.json")
    for name, value in changes.items():
        setattr(base, name, value)
    return base


def test_a_range_that_cannot_be_planned_is_a_copy_error(tmp_path: Path) -> None:
    source, dest = files(tmp_path)
    with pytest.raises(CopyError, match="not aligned to 512-byte blocks"):
        asyncio.run(copy(source, dest, options(tmp_path, range=(100, 4096))))
    assert Path(dest).read_bytes() == bytes(SIZE)


def test_a_value_error_from_a_bug_is_not_turned_into_a_copy_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("an internal bug")

    monkeypatch.setattr(_engine, "_make_plan", broken)
    source, dest = files(tmp_path)
    with pytest.raises(ValueError, match="an internal bug") as raised:
        asyncio.run(copy(source, dest, options(tmp_path)))
    assert not isinstance(raised.value, CopyError)


def test_the_same_copy_without_the_bug_succeeds(tmp_path: Path) -> None:
    source, dest = files(tmp_path)
    summary = asyncio.run(copy(source, dest, options(tmp_path)))
    assert summary.copied_bytes == SIZE and summary.verified
    assert Path(dest).read_bytes() == Path(source).read_bytes()


@pytest.mark.parametrize("end", ["source", "destination"])
def test_an_end_that_is_not_a_volume_is_named_with_its_side(tmp_path: Path, end: str) -> None:
    """``/dev/null`` or ``/dev/zero`` as an end: one line naming the side and the path,
    where it said ``StorageError: [Errno 22] open failed: ...``."""
    source, dest = files(tmp_path)
    source, dest = ("/dev/zero", dest) if end == "source" else (source, "/dev/null")
    odd = source if end == "source" else dest
    with pytest.raises(CopyError) as refused:
        asyncio.run(copy(source, dest, options(tmp_path)))
    assert str(refused.value) == (
        f"{end} {odd}: open failed: {odd} is neither a regular file nor a block device"
    )


def test_streams_that_stopped_for_the_same_reason_are_said_together() -> None:
    lost = "session to 10.0.0.2:3260 lost and not recovered after 12 attempts: refused"
    stats = [StreamStats(i, "p") for i in range(4)]
    for s in stats[:3]:
        s.error = lost
    stats[3].error = "path failed: no answer to NOP-Out"
    assert _engine._stream_errors(stats) == (
        f"streams 0, 1, 2: {lost}; stream 3: path failed: no answer to NOP-Out"
    )
