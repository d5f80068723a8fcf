"""The tail of a copy's telemetry file, read from its end and served as its own JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reservoir.agent.control import telemetry


def write(path: Path, n: int, extra: bytes = b"") -> None:
    lines = [json.dumps({"type": "stream", "n": i, "pad": "x" * 90}) for i in range(n)]
    path.write_bytes(("\n".join(lines) + "\n").encode() + extra)


def test_the_last_records_of_a_file_longer_than_a_chunk(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write(path, 5000)  # ~560 KB: many chunks
    got = telemetry.read_tail(path, 1000)
    assert [r["n"] for r in got] == list(range(4000, 5000))
    assert [r["n"] for r in telemetry.read_tail(path, 10_000)] == list(range(5000))


def test_a_line_being_written_and_a_torn_one_are_left_out(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write(path, 3, extra=b'{"type": "str')  # the writer is mid-line
    assert [r["n"] for r in telemetry.read_tail(path, 10)] == [0, 1, 2]
    path.write_bytes(b'{"n": 0}\n{"n": 1, {"torn\n{"n": 2}\n')
    assert telemetry.read_tail(path, 10) == [{"n": 0}, {"n": 2}]
    assert json.loads(telemetry.TelemetryTail().json(path, 10)) == [{"n": 0}, {"n": 2}]


def test_the_served_json_is_the_files_own_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"b":2,"a":1}\n{"c":3}\n')
    assert telemetry.TelemetryTail().json(path, 1) == b'[{"c":3}]'
    assert telemetry.TelemetryTail().json(path, 5) == b'[{"b":2,"a":1},{"c":3}]'


def test_a_missing_file_has_no_records(tmp_path: Path) -> None:
    assert telemetry.read_tail(tmp_path / "none.jsonl", 10) == []
    assert telemetry.TelemetryTail().json(tmp_path / "none.jsonl", 10) == b"[]"


def test_each_line_is_checked_once_across_polls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.jsonl"
    write(path, 100)
    checks: list[bytes] = []
    parses = telemetry._parses

    def counted(line: bytes) -> bool:
        checks.append(line)
        return parses(line)

    monkeypatch.setattr(telemetry, "_parses", counted)
    tail = telemetry.TelemetryTail()
    assert [r["n"] for r in json.loads(tail.json(path, 50))] == list(range(50, 100))
    assert len(checks) == 50
    with open(path, "ab") as f:
        f.write(b'{"n": 100, "torn\n{"n": 101}\n')
    got = json.loads(tail.json(path, 50))
    assert [r["n"] for r in got] == [*range(52, 100), 101]  # the torn line left out
    assert len(checks) == 52  # only the two new lines were parsed
    path.write_bytes(b'{"n": 7}\n')  # replaced: checked afresh
    assert json.loads(tail.json(path, 50)) == [{"n": 7}]
