"""A destination's hold, watched while the copy writes it (agent/transfer/_hold_watch):
another initiator's CLEAR is answered by holding the LUN again, and said in the
summary; a hold taken by another initiator stops the copy. Real target, real sessions;
the copy's writes held at a known point by a :class:`WriteGate` while the other
initiator acts. (A target killed and restarted under a copy: test_copy.py.)"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.agent.initiator import (
    WRITE_EXCLUSIVE_REGISTRANTS_ONLY,
    Session,
    pr_clear,
    pr_read_keys,
    pr_read_reservation,
    pr_register,
    pr_reserve,
)
from reservoir.agent.transfer import CopyError, CopyOptions, CopySummary, copy
from reservoir.agent.transfer._summary import format_summary
from reservoir.lab.peers import ReservoirTarget

from .gates import WriteGate

pytestmark = pytest.mark.integration

SIZE = 32 << 20
EXTENT = 1 << 20
OTHER = "iqn.2026-11.org.example:another-host"
OTHER_KEY = 0x0BAD_C0FFEE


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "source.img"
    path.write_bytes(os.urandom(SIZE))
    return path


@pytest.fixture
def lun(tmp_path: Path) -> Path:
    path = tmp_path / "lun0.img"
    path.write_bytes(bytes(SIZE))
    return path


@pytest.fixture
def target(tmp_path: Path, lun: Path) -> Iterator[ReservoirTarget]:
    with ReservoirTarget([lun], log_path=tmp_path / "target.log", open_access=True) as t:
        yield t


async def other_initiator(target: ReservoirTarget, *, take: bool) -> None:
    """Another host clears the LUN's reservations (registering first, as CLEAR needs),
    and with ``take`` reserves it for itself."""
    async with await Session.open(
        "127.0.0.1", target.port, target.iqn, initiator_name=OTHER
    ) as other:
        await pr_register(other, 0, OTHER_KEY)
        await pr_clear(other, 0, OTHER_KEY)
        if take:
            await pr_register(other, 0, OTHER_KEY)
            await pr_reserve(other, 0, OTHER_KEY, WRITE_EXCLUSIVE_REGISTRANTS_ONLY)


async def reservations(target: ReservoirTarget) -> tuple[list[int], tuple[int, int] | None]:
    async with await Session.open(
        "127.0.0.1", target.port, target.iqn, initiator_name=OTHER
    ) as other:
        return await pr_read_keys(other, 0), await pr_read_reservation(other, 0)


async def copy_with_another_initiator(
    tmp_path: Path, source: Path, target: ReservoirTarget, *, take: bool
) -> CopySummary:
    """A copy whose writes are held after 8 MiB while the other initiator acts."""
    gate = WriteGate(passing=8 * EXTENT)
    opts = CopyOptions(streams=2, extent_size=EXTENT, checkpoint=tmp_path / "ck.json")
    opts.on_session = gate
    running = asyncio.create_task(copy(str(source), target.url(0), opts))
    while len(gate.held) < 2:  # both streams wait at the gate: the copy holds the LUN
        assert not running.done(), "the copy ended before its writes were held"
        await asyncio.sleep(0.01)
    await other_initiator(target, take=take)
    gate.open()
    return await running


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_hold_another_initiator_clears_is_taken_again_and_said(
    tmp_path: Path,
    source: Path,
    lun: Path,
    target: ReservoirTarget,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "reservoir.copy")
    summary = asyncio.run(copy_with_another_initiator(tmp_path, source, target, take=False))
    assert summary.verified and sha(lun) == sha(source)
    said = format_summary(summary)
    assert "no other initiator could write the destination meanwhile" not in said
    assert "other initiators could write the destination then" in said
    assert "could not release" not in caplog.text  # the copy's own CLEAR went through
    (lapse,) = summary.hold_lapses
    assert lapse.startswith(f"destination LUN 0 of {target.iqn}: not held from ")
    assert "another initiator cleared or preempted the reservation (unit attention 2Ah/03h)" in (
        lapse
    )
    assert "held again under the copy's key" in caplog.text
    assert asyncio.run(reservations(target)) == ([], None)


def test_a_hold_another_initiator_takes_stops_the_copy_and_leaves_theirs(
    tmp_path: Path, source: Path, lun: Path, target: ReservoirTarget
) -> None:
    with pytest.raises(CopyError) as stopped:
        asyncio.run(copy_with_another_initiator(tmp_path, source, target, take=True))
    assert f"destination LUN 0 of {target.iqn}" in str(stopped.value)
    assert "another initiator" in str(stopped.value)
    keys, reservation = asyncio.run(reservations(target))
    assert reservation == (OTHER_KEY, WRITE_EXCLUSIVE_REGISTRANTS_ONLY) and keys == [OTHER_KEY]
