"""How the commands log: -v and -q, text or JSON lines."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from reservoir.common.logs import JsonFormatter, levels


@pytest.mark.parametrize(
    ("verbose", "quiet", "expected"),
    [
        (0, 0, (logging.INFO, logging.NOTSET)),
        (1, 0, (logging.INFO, logging.DEBUG)),  # -v: Reservoir's own debug messages
        (2, 0, (logging.DEBUG, logging.NOTSET)),  # -vv: every library's too
        (0, 1, (logging.WARNING, logging.NOTSET)),
        (0, 2, (logging.ERROR, logging.NOTSET)),
        (1, 1, (logging.INFO, logging.NOTSET)),
    ],
)
def test_each_v_and_q_moves_the_level_one_step(
    verbose: int, quiet: int, expected: tuple[int, int]
) -> None:
    assert levels(verbose, quiet) == expected


def test_a_json_line_has_the_time_level_logger_message_and_traceback() -> None:
    try:
        raise OSError(5, "medium error")
    except OSError:
        record = logging.LogRecord(
            "reservoir.copy", logging.ERROR, __file__, 1, "copy %s failed", ("a",), sys.exc_info()
        )
    line = json.loads(JsonFormatter().format(record))
    assert line["level"] == "ERROR" and line["logger"] == "reservoir.copy"
    assert line["message"] == "copy a failed" and line["time"].endswith("Z")
    assert "OSError: [Errno 5] medium error" in line["exception"]


def _copy(*flags: str, tmp: str) -> str:
    argv = [sys.executable, "-m", "reservoir", *flags, "copy", f"{tmp}/missing", f"{tmp}/d.img"]
    return subprocess.run(argv, capture_output=True, text=True, check=False).stderr


def test_the_command_logs_json_lines_and_q_keeps_only_warnings(tmp_path: object) -> None:
    lines = _copy("--log-format", "json", tmp=str(tmp_path)).splitlines()
    logged = [json.loads(x) for x in lines if x.startswith("{")]
    assert any(x["logger"] == "reservoir.copy" and x["level"] == "INFO" for x in logged)
    assert "reservoir copy: source" in lines[-1]  # the error itself, as always
    quiet = _copy("-q", tmp=str(tmp_path))
    assert " INFO " not in quiet and "reservoir copy: source" in quiet


def _logged_by_httpx(*flags: str) -> str:
    code = (
        "import logging, sys; from reservoir.common.logs import setup_logging; "
        f"setup_logging({flags.count('-v')}, {flags.count('-q')}); "
        "logging.getLogger('httpx').info('HTTP Request: POST /heartbeat'); "
        "logging.getLogger('httpx').warning('a warning'); "
        "logging.getLogger('reservoir.agent').info('an agent line')"
    )
    argv = [sys.executable, "-c", code]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stderr


def test_a_librarys_line_for_each_request_shows_only_from_v_on() -> None:
    plain = _logged_by_httpx()
    assert "POST /heartbeat" not in plain
    assert "a warning" in plain and "an agent line" in plain
    assert "POST /heartbeat" in _logged_by_httpx("-v")
    assert "POST /heartbeat" in _logged_by_httpx("-v", "-v")
