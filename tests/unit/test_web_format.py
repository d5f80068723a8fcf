"""The dashboard's formatting helpers (web/src/format.js), run in node."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

FORMAT = Path(__file__).resolve().parents[2] / "web" / "src" / "format.js"


def verification(transfer: dict[str, Any]) -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (make install)")
    script = f"""
import {{ verification }} from {json.dumps(FORMAT.as_uri())};
console.log(JSON.stringify(verification({json.dumps(transfer)})));
"""
    out = subprocess.run(
        [node, "--input-type=module"], input=script, capture_output=True, text=True, check=True
    )
    text: str = json.loads(out.stdout)
    return text


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
    assert verification(transfer) == shown
