"""What a gridftp or xrdcp run of a campaign is made of, without running the tools: the
source cut by the paths' streams, the files the peers send, their progress as
intervals, where the destination goes, and the run record."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from reservoir.campaigns._scenario import Scenario
from reservoir.campaigns.results import Event
from reservoir.campaigns.run.peer_run import (
    PeerSources,
    _record,
    progress_intervals,
    shares,
)
from reservoir.lab.bench_copy import write_source
from reservoir.lab.peer_copy import PeerCopy, digest_files
from reservoir.lab.peers import PeerError
from reservoir.lab.transfer_peers import nobody_parent

MIB = 1 << 20


def peer_scenario(tool: str = "xrdcp", streams: int = 32) -> Scenario:
    return Scenario(
        name=f"{tool}-s{streams}", tool=tool, streams=streams, pacing="off",  # type: ignore[arg-type]
        pacing_rate_mbit=None, equalizer=None, multilink="paths", cc="bbr", loss=None,
        duration_s=None, size_bytes=64 * MIB,
    )  # fmt: skip


def test_the_source_is_cut_in_proportion_to_each_paths_streams() -> None:
    assert shares(4 << 30, [8]) == [4 << 30]
    assert shares(4 << 30, [8, 8]) == [2 << 30, 2 << 30]
    assert shares(1000 * MIB, [14, 7, 3]) == [583 * MIB, 291 * MIB, 126 * MIB]
    assert sum(shares(100 * MIB + 4096, [1, 1, 1])) == 100 * MIB + 4096


def test_one_path_sends_the_source_itself_and_several_send_parts_of_it(tmp_path: Path) -> None:
    sources = PeerSources(tmp_path / "work")
    src = sources.source(3 * MIB, None)
    assert sources.split(src, [3 * MIB]) == [src.path]
    parts = sources.split(src, [2 * MIB, MIB])
    assert [p.stat().st_size for p in parts] == [2 * MIB, MIB]
    assert digest_files(parts) == src.digest
    assert sources.split(src, [2 * MIB, MIB]) == parts  # cut once
    sources.close()
    assert not src.path.exists() and not any(p.exists() for p in parts)


def test_peers_send_the_sites_source_when_it_has_their_size(tmp_path: Path) -> None:
    site = write_source(tmp_path / "site.img", 2 * MIB, 0)
    sources = PeerSources(tmp_path / "work")
    assert sources.source(2 * MIB, site) is site
    own = sources.source(MIB, site)
    assert own is not site and own.size == MIB
    assert sources.source(MIB, None) is own
    sources.close()
    assert site.path.exists() and not own.path.exists()


def test_progress_on_disk_becomes_per_second_goodput() -> None:
    progress = [(0.5, 10 * MIB), (1.0, 20 * MIB), (1.5, 30 * MIB), (2.0, 40 * MIB)]
    got = progress_intervals(progress)
    assert [iv.t for iv in got] == [1.0, 2.0]
    assert all(iv.bps == pytest.approx(20 * MIB * 8) for iv in got)
    assert progress_intervals([]) == []


def test_the_destination_goes_beside_the_run_or_on_the_same_disk() -> None:
    with tempfile.TemporaryDirectory() as folder:  # pytest's own: closed to others
        outer = Path(folder)
        inner = outer / "work"
        inner.mkdir()
        os.chmod(outer, 0o755)
        assert nobody_parent(inner) == inner.resolve()
        os.chmod(outer, 0o700)  # nobody may not enter: the temporary folder, same disk
        assert nobody_parent(inner) == Path(tempfile.gettempdir())


def test_a_run_records_the_copy_with_its_notes_and_fails_if_the_copy_differs() -> None:
    copy = PeerCopy("xrdcp", 1000.0, 2.0, 64 * MIB, 0.5, 0.25, True, 32, 15, [(2.0, 64 * MIB)])
    run = _record(peer_scenario(), 1, copy, [Event(0.5, "link-down", "l1")])
    assert (run.started, run.seconds, run.bytes, run.goodput_bps) == (
        1000.0, 2.0, 64 * MIB, 64 * MIB * 8 / 2.0,
    )  # fmt: skip
    assert run.cpu_seconds == 0.75 and run.verified is True and run.ok
    assert [(e.t, e.kind, e.detail) for e in run.events] == [
        (0.0, "note", "xrdcp: 32 streams asked, 15 used"),
        (0.5, "link-down", "l1"),
        (2.0, "note", "CPU: client 0.50 s, server 0.25 s"),
    ]
    copy.matched = False
    failed = _record(peer_scenario(), 1, copy, [])
    assert failed.verified is False and not failed.ok
    assert failed.error == "the destination differs from the source: xrdcp did not copy it whole"


def test_no_destination_for_nobody_off_the_disk_of_the_run(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o700)
    try:
        with pytest.raises(PeerError, match=r"who may not enter .* another file system"):
            nobody_parent(tmp_path, temp=Path("/proc"))  # not the disk tmp_path is on
    finally:
        os.chmod(tmp_path, 0o755)
