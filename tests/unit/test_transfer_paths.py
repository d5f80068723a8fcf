"""Path health wiring of the copy engine with fake sides: a path that stops
progressing fails and its extents move to the other path; recovery reopens streams."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from fake_channels import Memory

from reservoir.agent.initiator import WriteData
from reservoir.agent.iscsi.pdu import FileSpan
from reservoir.agent.paths.health import HealthConfig
from reservoir.agent.transfer import _checkpoint as ck
from reservoir.agent.transfer._endpoints import (
    Channel,
    CountingChannel,
    EndpointError,
    PathSpec,
    pair_binds,
)
from reservoir.agent.transfer._engine import CopyOptions, Run
from reservoir.agent.transfer._errors import CopyError
from reservoir.agent.transfer._paths import Pinger
from reservoir.agent.transfer._plan import ServerPair, make_plan
from reservoir.agent.transfer._summary import CopySummary, format_summary

BLOCK = 512
SIZE = 8 << 20
EXTENT = 128 << 10
FAST = HealthConfig(ft_hthresh=3, ft_lthresh=1, slow_tout=0.25, hbspan=0.2, hb_miss_limit=3)


class Link:
    """One path's network: every command takes ``delay``; while cut, commands and
    pings hang (a dead link does not answer, it does not refuse)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.open = asyncio.Event()
        self.open.set()
        self.bytes = 0
        self.bytes_after_restore = 0
        self.restored = False

    async def cross(self, length: int) -> None:
        await asyncio.sleep(self.delay)
        await self.open.wait()
        self.bytes += length
        if self.restored:
            self.bytes_after_restore += length

    def cut(self) -> None:
        self.open.clear()

    def restore(self) -> None:
        self.restored = True
        self.open.set()


class Volume(Memory):
    """A volume in memory reached over ``link`` (when given): each command crosses it."""

    def __init__(self, data: bytearray, link: Link | None = None) -> None:
        super().__init__(data)
        self.link = link

    async def read(self, offset: int, length: int) -> bytes:
        if self.link is not None:
            await self.link.cross(0)
        return bytes(self.data[offset : offset + length])

    async def write(self, offset: int, data: WriteData) -> None:
        if self.link is not None:
            await self.link.cross(len(data))
        assert not isinstance(data, FileSpan)  # never sent to a channel in memory
        self.data[offset : offset + len(data)] = data


class FakeSide:
    device: str | None = None
    hashes = False

    def __init__(self, data: bytearray, remote: bool, links: dict[str, Link]) -> None:
        self.data, self.remote, self.links = data, remote, links
        self.label = "fake"
        self.size, self.block_size = len(data), BLOCK
        self.opened: list[tuple[int, str]] = []

    async def channel(self, stream: int, path: PathSpec | None) -> Channel:
        if path is None:
            return Volume(self.data)
        link = self.links[str(path)]
        await link.open.wait()  # a login over a cut link hangs too
        self.opened.append((stream, str(path)))
        return Volume(self.data, link)

    async def close(self) -> None:
        return None


class FakePinger:
    def __init__(self, link: Link) -> None:
        self.link = link

    async def ping(self, timeout: float = 10.0) -> None:
        await asyncio.wait_for(self.link.open.wait(), timeout)

    async def close(self) -> None:
        return None


A, B = PathSpec("10.0.1.1", "10.0.1.2"), PathSpec("10.0.2.1", "10.0.2.2")


async def run_copy(
    tmp_path: Path,
    script: list[tuple[float, str, str]],
    delay: float = 0.02,
    outage_wait: float = 30.0,
) -> tuple[CopySummary, dict[str, Link], bytearray, bytearray, FakeSide]:
    links = {str(A): Link(delay), str(B): Link(delay)}
    source = bytearray(os.urandom(SIZE))
    dest = bytearray(SIZE)
    src, dst = FakeSide(source, False, {}), FakeSide(dest, True, links)
    plan = make_plan(0, SIZE, extent_size=EXTENT, block_size=BLOCK, pair=ServerPair("s", "d", 4))
    options = CopyOptions(streams=4, extent_size=EXTENT, piece_size=32 << 10, depth=2)
    options.health = FAST
    options.outage_wait = outage_wait
    options.telemetry = tmp_path / "telemetry.jsonl"
    checkpoint = ck.Checkpoint(tmp_path / "ck.json", ck.CopyKey("s", "d", 0, SIZE, EXTENT))

    async def pinger(path: PathSpec) -> Pinger:
        await links[str(path)].open.wait()
        return FakePinger(links[str(path)])

    run = Run(
        plan,
        src,
        dst,
        paths=[A, B],
        options=options,
        checkpoint=checkpoint,
        progress=None,
        pinger=pinger,
    )

    async def drive() -> None:
        for at, action, which in script:
            await asyncio.sleep(at)
            getattr(links[which], action)()

    driver = asyncio.create_task(drive())
    try:
        summary = await asyncio.wait_for(run.execute(), 30)
    finally:
        driver.cancel()
    print(format_summary(summary))
    return summary, links, source, dest, dst


def states(summary: CopySummary, path: PathSpec) -> list[str]:
    report = next(r for r in summary.path_reports if r.path == str(path))
    return [state for _, state, _ in report.transitions]


def test_both_paths_carry_and_stay_up(tmp_path: Path) -> None:
    summary, links, source, dest, _ = asyncio.run(run_copy(tmp_path, []))
    assert dest == source
    assert all(link.bytes > SIZE // 4 for link in links.values())
    assert states(summary, A) == [] and states(summary, B) == []
    assert {p.path: p.bytes > 0 for p in summary.paths()} == {str(A): True, str(B): True}


def test_failed_path_extents_move_to_the_other(tmp_path: Path) -> None:
    summary, links, source, dest, _ = asyncio.run(run_copy(tmp_path, [(0.3, "cut", str(A))]))
    assert dest == source
    assert states(summary, A)[:1] == ["failed"]
    assert states(summary, B) == []
    report = next(r for r in summary.path_reports if r.path == str(A))
    assert report.moved_extents > 0
    assert report.failover_window is not None and report.failover_window < 2.0
    assert links[str(B)].bytes > links[str(A)].bytes
    assert all(not s.up for s in summary.streams if s.path == str(A))
    text = format_summary(summary)
    assert "failover window" in text and "failed" in text
    lines = (tmp_path / "telemetry.jsonl").read_text().splitlines()
    assert any('"type":"path"' in line and '"state":"failed"' in line for line in lines)
    assert any('"type":"progress"' in line for line in lines)


def test_recovered_path_reopens_streams_and_takes_work(tmp_path: Path) -> None:
    script = [(0.2, "cut", str(A)), (0.8, "restore", str(A))]
    summary, links, source, dest, dst = asyncio.run(run_copy(tmp_path, script))
    assert dest == source
    assert states(summary, A)[:3] == ["failed", "recovered", "up"]
    reopened = [s for s in summary.streams if s.path == str(A)]
    assert all(s.reopened >= 1 and s.up for s in reopened)
    assert links[str(A)].bytes_after_restore > 0
    assert sum(1 for _, p in dst.opened if p == str(A)) == 4  # 2 at start, 2 reopened


def test_counting_channel_counts_completed_commands() -> None:
    counted: list[int] = []
    channel = CountingChannel(Volume(bytearray(4096)), counted.append)
    asyncio.run(channel.write(0, b"x" * 1024))
    asyncio.run(channel.read(0, 512))
    assert counted == [1024, 512]


def test_bind_pairs_each_local_with_its_subnet() -> None:
    portals = [("10.201.1.2", 3260), ("10.201.2.2", 3261)]
    paths = pair_binds(["10.201.2.1", "10.201.1.1/16"], portals)
    assert paths == [
        PathSpec("10.201.2.1", "10.201.2.2", 3261),
        PathSpec("10.201.1.1", "10.201.1.2", 3260),
    ]
    with pytest.raises(EndpointError, match=r"no portal on 192\.168\.7\.0/24"):
        pair_binds(["192.168.7.1"], portals)


def test_every_path_down_then_back_completes(tmp_path: Path) -> None:
    script = [(0.2, "cut", str(A)), (0.0, "cut", str(B))]
    script += [(1.0, "restore", str(A)), (0.0, "restore", str(B))]
    summary, _, source, dest, _ = asyncio.run(run_copy(tmp_path, script))
    assert dest == source
    assert states(summary, A)[:1] == states(summary, B)[:1] == ["failed"]
    assert all(s.up for s in summary.streams)


def test_every_path_down_for_good_gives_up_after_the_outage_wait(tmp_path: Path) -> None:
    script = [(0.2, "cut", str(A)), (0.0, "cut", str(B))]
    with pytest.raises(CopyError, match=r"no path came back within 0\.5 s"):
        asyncio.run(run_copy(tmp_path, script, outage_wait=0.5))
