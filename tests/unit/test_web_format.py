"""The dashboard's formatting helpers (web/src/format.js), run in node."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

FORMAT = Path(__file__).resolve().parents[2] / "web" / "src" / "format.js"


def run_format(function: str, argument: dict[str, Any]) -> str:
    """``function(argument)`` of format.js, run in node: a string."""
    text: str = _run(function, argument)
    return text


def run_format_list(function: str, argument: dict[str, Any]) -> list[str]:
    """``function(argument)`` of format.js, run in node: a list of strings."""
    lines: list[str] = _run(function, argument)
    return lines


def _run(function: str, argument: dict[str, Any]) -> Any:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (make install)")
    script = f"""
import {{ {function} }} from {json.dumps(FORMAT.as_uri())};
console.log(JSON.stringify({function}({json.dumps(argument)})));
"""
    out = subprocess.run(
        [node, "--input-type=module"], input=script, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@pytest.mark.parametrize(
    ("transfer", "shown"),
    [
        ({"verify": True, "verification": "receipt"}, "on (receipt)"),
        ({"verify": True, "verification": "storage"}, "on (storage)"),
        ({"verify": True}, "on (storage)"),  # a coordinator from before the mode
        ({"verify": False, "verification": "receipt"}, "off"),
    ],
)
def test_the_transfer_page_says_how_a_transfer_is_verified(
    transfer: dict[str, Any], shown: str
) -> None:
    assert run_format("verification", transfer) == shown


@pytest.mark.parametrize(
    ("summary", "shown"),
    [
        (
            {"verified": True, "source_watched": "its modification and change times"},
            "source unchanged throughout (by its modification and change times)",
        ),
        (
            {"verified": True, "source_watched": "its sectors written", "source_rehashed": True},
            "source written during the copy, then hashed again at the end: equal to what was sent",
        ),
        ({"verified": True, "source_watched": ""}, "source not watched for changes"),
        ({"verified": True}, "source not watched for changes"),  # an agent from before
        ({"verified": False, "source_watched": "its sectors written"}, ""),
    ],
)
def test_a_legs_verification_says_what_watched_its_source(
    summary: dict[str, Any], shown: str
) -> None:
    assert run_format("sourceWatch", summary) == shown


LAPSE = (
    "destination LUN 0 of iqn.2026-11.org.example:vol1: not held from 1.81 s to 7.00 s "
    "(the target restarted or was reset (unit attention 29h/00h))"
)


@pytest.mark.parametrize(
    ("summary", "shown"),
    [
        (
            {"hold": "reservation", "hold_lapses": [LAPSE]},
            f"destination hold lost for a time (other initiators could write then): {LAPSE}",
        ),
        ({"hold": "reservation", "hold_lapses": []}, ""),
        ({"hold": "reservation"}, ""),  # an agent from before
        ({"hold": "", "hold_lapses": [LAPSE]}, ""),
    ],
)
def test_a_legs_verification_says_when_its_destination_was_not_held(
    summary: dict[str, Any], shown: str
) -> None:
    assert run_format("holdLapses", summary) == shown


def test_the_transfer_page_names_each_leg_that_waits_to_be_resumed_or_failed() -> None:
    lost = "every stream failed with 12 extents left (streams 0, 1: session lost)"
    legs = [
        {"index": 0, "state": "running", "last_error": lost},  # the coordinator resumes it
        {"index": 1, "state": "running", "last_error": None},
        {"index": 2, "state": "failed", "last_error": "destination is held by another"},
        {"index": 3, "state": "completed", "last_error": None},
    ]
    assert run_format_list("legTroubles", {"legs": legs}) == [
        f"leg 0: waiting to be resumed ({lost})",
        "leg 2 failed: destination is held by another",
    ]
    assert run_format_list("legTroubles", {"legs": []}) == []
