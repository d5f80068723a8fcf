"""Locations, paths, progress lines and summaries of ``reservoir copy``."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import xxhash

from reservoir.agent.transfer import (
    CopySummary,
    PathSpec,
    Progress,
    ProgressPrinter,
    RemoteLun,
    StreamStats,
    format_summary,
    parse_location,
    parse_path,
    root_hash,
)
from reservoir.agent.transfer._endpoints import EndpointError
from reservoir.agent.transfer._progress import interrupted
from reservoir.agent.transfer.cli import parse_range


def test_locations() -> None:
    assert parse_location("iscsi://10.0.0.2/iqn.2026-11.org.x:vol/3") == RemoteLun(
        "10.0.0.2", 3260, "iqn.2026-11.org.x:vol", 3
    )
    remote = parse_location("iscsi://[::1]:3261/iqn.x:y/0")
    assert remote == RemoteLun("::1", 3261, "iqn.x:y", 0)
    assert str(remote) == "iscsi://[::1]:3261/iqn.x:y/0"
    assert parse_location("/dev/loop0") == Path("/dev/loop0")


@pytest.mark.parametrize(
    "bad", ["iscsi://host/iqn.x", "iscsi://host/iqn.x/lun", "iscsi:///iqn.x/0", "iscsi://h/a/b/0"]
)
def test_bad_locations(bad: str) -> None:
    with pytest.raises(EndpointError, match="IQN/LUN"):
        parse_location(bad)


def test_paths() -> None:
    assert parse_path("10.0.1.1=10.0.2.1") == PathSpec("10.0.1.1", "10.0.2.1")
    assert parse_path("10.0.1.1=10.0.2.1:3261") == PathSpec("10.0.1.1", "10.0.2.1", 3261)
    assert parse_path("fd00::1=[fd00::2]:3261") == PathSpec("fd00::1", "fd00::2", 3261)
    assert str(parse_path("a=b:1")) == "a=b:1"
    with pytest.raises(EndpointError):
        parse_path("10.0.1.1")


def test_range() -> None:
    assert parse_range("4096:0x1000") == (4096, 4096)


def test_root_hash_is_xxh3_of_the_digests_in_order() -> None:
    digests = [bytes([i]) * 16 for i in range(3)]
    assert root_hash(digests) == xxhash.xxh3_128_hexdigest(b"".join(digests))
    assert root_hash(digests) != root_hash(digests[::-1])


def progress(done: int) -> Progress:
    return Progress(done, 100 << 20, done, 2.0, 1, 10, 3, 4, 1, 2)


def test_progress_line_and_throttle() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out)
    printer(progress(50 << 20))
    printer(progress(60 << 20))  # within the interval: not printed
    assert out.getvalue().count("\n") == 1
    assert "50.0 MiB / 100.0 MiB (50%)" in out.getvalue()
    assert "26.2 MB/s" in out.getvalue() and "ETA 2s" in out.getvalue()
    assert "streams 3/4  paths 1/2" in out.getvalue()


def test_an_interrupted_copy_says_how_far_it_got_from_the_last_progress_seen() -> None:
    printer = ProgressPrinter(io.StringIO())
    assert interrupted(printer.last, None).startswith(
        "interrupted before its first extent; its remote destination stays held"
    )
    printer(progress(50 << 20))
    printer(progress(60 << 20))  # not printed (throttled), but the one to tell
    assert interrupted(printer.last, "/var/lib/c.json").startswith(
        "interrupted with 1 of 10 extents done (60.0 MiB of 100.0 MiB), kept in /var/lib/c.json;"
    )
    assert interrupted(printer.last, None, held=False) == (
        "interrupted with 1 of 10 extents done (60.0 MiB of 100.0 MiB), kept in its checkpoint; "
        "the same command with --resume goes on from there"
    )


def test_summary_table() -> None:
    streams = [StreamStats(0, "a=b", 8 << 20, 1, 0, 0.5), StreamStats(1, "a=b", error="lost")]
    summary = CopySummary(
        "src", "dst", 0, 8 << 20, 8 << 20, 1.0, "ab" * 16, True, 8 << 20, 0, 0, 0, 0, "ck", streams
    )
    text = format_summary(summary)
    assert "lost: lost" in text and "16.8" in text and "1/2" in text
    assert f"root hash {'ab' * 16} (verified" in text
    assert summary.paths()[0].bytes == 8 << 20


def test_the_summary_s_tables_keep_their_columns_under_long_stream_names() -> None:
    url = "iscsi://127.0.0.1:3270/iqn.2026-11.org.example:ex1/0"
    streams = [
        StreamStats(0, url, 109051904, 13, 0, 0.4),
        StreamStats(11, url, 8 << 20, 1, 2, 0.5, error="connection lost"),
    ]
    summary = CopySummary(
        "src", url, 0, 8 << 20, 8 << 20, 1.0, "ab" * 16, True, 8 << 20, 0, 0, 0, 0, "ck", streams
    )
    header, first, second, path_header, path = format_summary(summary).splitlines()[:5]
    assert first.startswith(f"0 ({url})   109051904") and second.startswith(f"11 ({url})  ")
    for column in ("bytes", "MB/s", "extents", "retries"):  # right edges line up
        edge = header.index(column) + len(column)
        assert first[edge] == second[edge] == " " and first[edge - 1] != " " != second[edge - 1]
    assert first.index("ok") == second.index("lost: connection lost") == header.index("state")
    assert path_header.index("bytes") + len("bytes") == path.index("117440512") + 9


@pytest.mark.parametrize(
    ("hold", "how"),
    [
        ("reservation", "held by a persistent reservation"),
        ("registration", "held by registration only"),
    ],
)
def test_a_hold_lost_for_a_time_is_said_with_how_the_copy_held_it(hold: str, how: str) -> None:
    summary = CopySummary(
        "src", "dst", 0, 8 << 20, 8 << 20, 1.0, "ab" * 16, True, 8 << 20, 0, 0, 0, 0, "ck"
    )
    summary.hold, summary.hold_lapses = hold, ["LUN 0: not held from 1.00 s to 2.00 s (why)"]
    assert (
        f"{how}, but LUN 0: not held from 1.00 s to 2.00 s (why): other initiators could "
        "write the destination then (the end check hashed all of it after)"
    ) in format_summary(summary)


def test_summary_tells_the_warm_sessions_and_the_first_write() -> None:
    summary = CopySummary(
        "src", "dst", 0, 8 << 20, 8 << 20, 1.0, "ab" * 16, True, 8 << 20, 0, 0, 0, 0, "ck"
    )
    assert "sessions:" not in format_summary(summary)  # a local copy has none
    summary.sessions_reused, summary.first_write = 4, 0.3125
    line = "sessions: 0 logged in, 4 warm from the agent's pool; first write at 0.312 s"
    assert line in format_summary(summary)
