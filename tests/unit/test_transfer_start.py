"""The start of a copy: its destinations opened at once, and its streams writing one
by one as they open, not once the slowest is open (fake sides and destinations that
open only when the test lets them)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, cast

import pytest
from fake_channels import Memory

from reservoir.agent.initiator import WriteData
from reservoir.agent.transfer import _checkpoint as ck
from reservoir.agent.transfer import _engine as engine
from reservoir.agent.transfer._endpoints import Channel, Login, PathSpec
from reservoir.agent.transfer._engine import CopyOptions, Run
from reservoir.agent.transfer._errors import CopyError
from reservoir.agent.transfer._plan import ServerPair, make_plan

BLOCK = 512
SIZE = 1 << 20
EXTENT = 64 << 10
ME = "iqn.2026-11.org.reservoir:unit"


class Watched(Memory):
    """A volume in memory whose ``written`` is set by its first write."""

    def __init__(self, data: bytes) -> None:
        super().__init__(bytearray(data))
        self.written = asyncio.Event()

    async def write(self, offset: int, data: WriteData) -> None:
        await super().write(offset, data)
        self.written.set()


class Side:
    """One end; with ``late``, that stream's channel opens only after the first write
    of another stream (a session that logged in after the probe, registering)."""

    device: str | None = None
    hashes = False

    def __init__(self, memory: Watched, remote: bool, late: int | None = None) -> None:
        self.memory, self.remote, self.late, self.label = memory, remote, late, "fake"
        self.size, self.block_size = len(memory.data), BLOCK

    async def channel(self, stream: int, path: PathSpec | None) -> Channel:
        if stream == self.late:
            await self.memory.written.wait()
        return self.memory

    async def close(self) -> None:
        return None


def test_a_stream_writes_as_soon_as_it_is_open_without_waiting_for_the_others(
    tmp_path: Path,
) -> None:
    source = Watched(os.urandom(SIZE))
    dest = Watched(bytes(SIZE))
    plan = make_plan(0, SIZE, extent_size=EXTENT, block_size=BLOCK, pair=ServerPair("s", "d", 2))
    run = Run(
        plan,
        Side(source, remote=False),
        Side(dest, remote=True, late=1),
        paths=[],
        options=CopyOptions(streams=2, extent_size=EXTENT, piece_size=16 << 10),
        checkpoint=ck.Checkpoint(tmp_path / "ck.json", ck.CopyKey("s", "d", 0, SIZE, EXTENT)),
        progress=None,
    )

    async def main() -> None:
        summary = await asyncio.wait_for(run.execute(), 10)
        assert summary.verified and dest.data == source.data
        assert [s.error for s in summary.streams] == [None, None]
        assert all(s.extents for s in summary.streams)  # the late one took part too

    asyncio.run(main())


class Member:
    """A destination as :func:`_open_dests` sees it: it records being taken back."""

    def __init__(self, said: list[str], name: str) -> None:
        self.said, self.name = said, name
        self.holds_reservation = name == "holder"

    async def unclaim(self) -> None:
        self.said.append(f"unclaim {self.name}")

    async def close(self) -> None:
        self.said.append(f"close {self.name}")


def opener(count: int, fails: str | None = None, said: list[str] | None = None) -> Any:
    """An ``open_dest`` whose opens return only once all ``count`` have begun."""
    begun: list[str] = []
    everyone = asyncio.Event()

    async def open_dest(text: str, *args: object, **kw: object) -> Member:
        begun.append(text)
        if len(begun) == count:
            everyone.set()
        await everyone.wait()
        if text == fails:
            raise CopyError(f"{text} refused")
        return Member(said if said is not None else [], text)

    return open_dest


def test_the_destinations_of_a_striped_copy_are_opened_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine, "open_dest", opener(3))
    dests = ["a", "b", "c"]
    opened = asyncio.run(
        asyncio.wait_for(
            engine._open_dests(dests, [SIZE] * 3, Login(ME), [], streams=2, mode=0o600, key=1), 5
        )
    )
    assert [cast(Member, side).name for side in opened] == dests


def test_a_destination_that_fails_to_open_takes_the_others_claims_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    said: list[str] = []
    monkeypatch.setattr(engine, "open_dest", opener(3, fails="b", said=said))
    monkeypatch.setattr(engine, "RemoteSide", Member)  # what is unclaimed
    with pytest.raises(CopyError, match="b refused"):
        asyncio.run(
            engine._open_dests(
                ["holder", "b", "c"], [SIZE] * 3, Login(ME), [], streams=1, mode=0o600, key=1
            )
        )
    # the holder's claim last; every opened one closed
    assert said[:2] == ["unclaim c", "unclaim holder"]
    assert sorted(said[2:]) == ["close c", "close holder"]
