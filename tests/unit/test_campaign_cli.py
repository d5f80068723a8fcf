"""``reservoir campaign show`` and ``report`` as a user runs them."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_campaign_report import make_campaign

from reservoir.campaigns import CAMPAIGN_DIR, load
from reservoir.cli import main


def test_show_lists_the_quick_subset_with_its_baselines(capsys: pytest.CaptureFixture[str]) -> None:
    path = CAMPAIGN_DIR / "lfn-2x500m-100ms.toml"
    assert main(["campaign", "show", str(path), "--quick"]) == 0
    out = capsys.readouterr().out
    quick = load(path).quick()
    assert f"{len(quick)} quick subset" in out
    assert all(s.name in out for s in quick)
    assert "(baseline iperf3-" in out


def test_show_of_a_bad_file_exits_2_naming_every_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n')
    assert main(["campaign", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "topology: must be a table" in err and "matrix: must be a table" in err


def test_report_writes_the_html_and_prints_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "run.json"
    make_campaign().save(results)
    assert main(["campaign", "report", str(results), "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "index.html").is_file()
    assert "report: " in capsys.readouterr().out
