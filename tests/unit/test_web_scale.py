"""The dashboard heatmap's colour scale (web/src/scale.js), run in node: the ramp tops
out at the 99th percentile, so one spike does not darken every other cell."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

SCALE = Path(__file__).resolve().parents[2] / "web" / "src" / "scale.js"


def colour_top(columns: Sequence[Sequence[float | None]], start: int = 0) -> dict[str, float]:
    """colourTop over ``columns`` (None: no sample), read from slot ``start`` on."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (make install)")
    size = len(columns[0])
    script = f"""
import {{ colourTop }} from {json.dumps(SCALE.as_uri())};
const cols = {json.dumps(columns)}.map((c) => Float64Array.from(c, (v) => v ?? NaN));
console.log(JSON.stringify(colourTop(cols, {start}, {size}, {size})));
"""
    out = subprocess.run(
        [node, "--input-type=module"], input=script, capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_one_spike_does_not_set_the_top_of_the_scale() -> None:
    got = colour_top([[100.0] * 199 + [10_000.0]])
    assert got == {"top": 100.0, "max": 10_000.0}


def test_without_outliers_the_top_is_about_the_largest_value() -> None:
    got = colour_top([[float(i) for i in range(1, 101)], [50.0] * 100])
    assert got["max"] == 100.0
    assert 97.0 <= got["top"] <= 100.0


def test_missing_samples_and_zeros_are_left_out() -> None:
    got = colour_top([[None, 0.0, 5.0, None], [None, None, 5.0, 5.0]], start=1)
    assert got == {"top": 5.0, "max": 5.0}


def test_nothing_to_show_gives_a_zero_scale() -> None:
    assert colour_top([[None, 0.0, None]]) == {"top": 0, "max": 0}


def test_a_full_window_is_sampled_and_still_tops_out_below_rare_peaks() -> None:
    # 64 streams x 1200 slots, values 1..100 Mbit/s, and 20 peaks of 10 Gbit/s
    columns: list[list[float | None]] = [
        [float(1 + (i * 7 + j) % 100) * 1e6 for i in range(1200)] for j in range(64)
    ]
    for k in range(20):
        columns[k][k * 50] = 10e9
    got = colour_top(columns)
    assert got["max"] == 10e9
    assert 95e6 <= got["top"] <= 100e6
