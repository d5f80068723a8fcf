"""Copies with a pool of warm sessions, into our target on loopback: the next copy takes
the sessions the last one gave back, and none carries a registration over."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Coroutine, Iterator
from pathlib import Path

import pytest

from reservoir.agent.initiator import Session, SessionPool, pr_read_keys
from reservoir.agent.transfer import CopyOptions, CopySummary, Progress, copy
from reservoir.agent.transfer._endpoints import RemoteSide
from reservoir.lab.peers import ReservoirTarget

pytestmark = pytest.mark.integration

SIZE = 32 << 20
ME = "iqn.2026-11.org.reservoir:copy"  # the engine's default initiator name


def random_file(path: Path) -> Path:
    path.write_bytes(os.urandom(SIZE))
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()[:SIZE]).hexdigest()


@pytest.fixture
def lun(tmp_path: Path) -> Path:
    path = tmp_path / "lun0.img"
    with open(path, "wb") as f:
        f.truncate(SIZE)
    return path


@pytest.fixture
def target(tmp_path: Path, lun: Path) -> Iterator[ReservoirTarget]:
    log = tmp_path / "target.log"
    with ReservoirTarget(
        [lun], log_path=log, extra=["--nop-interval", "0"], open_access=True
    ) as serving:
        yield serving
        alive = serving.alive()
    assert alive, log.read_text()[-4000:]


def options(checkpoint: Path, pool: SessionPool[Session], **kw: object) -> CopyOptions:
    opts = CopyOptions(streams=4, extent_size=1 << 20, checkpoint=checkpoint, pool=pool)
    for name, value in kw.items():
        setattr(opts, name, value)
    return opts


def logins_and_logouts(target: ReservoirTarget) -> tuple[int, int]:
    assert target.log_path is not None
    text = target.log_path.read_text()
    return text.count("login: "), text.count(": logout (reason")


async def registered_keys(target: ReservoirTarget) -> list[int]:
    async with await Session.open(
        target.host, target.port, target.iqn, initiator_name=ME + ":check"
    ) as session:
        return await pr_read_keys(session, 0)


def test_the_second_copy_takes_the_sessions_of_the_first(
    tmp_path: Path, lun: Path, target: ReservoirTarget
) -> None:
    sources = [random_file(tmp_path / f"src{i}.img") for i in range(2)]

    async def two_copies() -> tuple[list[CopySummary], int, tuple[int, int], list[int]]:
        pool: SessionPool[Session] = SessionPool()
        try:
            summaries = [
                await copy(str(src), target.url(0), options(tmp_path / f"ck{i}.json", pool))
                for i, src in enumerate(sources)
            ]
            idle, seen = pool.stats().idle, logins_and_logouts(target)
        finally:
            await pool.close()
        return summaries, idle, seen, await registered_keys(target)

    (cold, warm), idle, seen, keys = asyncio.run(two_copies())
    assert cold.verified and warm.verified and sha(lun) == sha(sources[1])
    assert (cold.sessions_opened, cold.sessions_reused) == (4, 0)
    assert (warm.sessions_opened, warm.sessions_reused) == (0, 4)
    assert warm.first_write is not None and cold.first_write is not None
    assert idle == 4 and seen == (4, 0)  # 4 logins for both copies, kept logged in
    assert keys == []  # each copy's CLEAR went through: no registration is left
    assert logins_and_logouts(target) == (5, 5)  # the pool's 4 at its close, and the check


def test_a_warm_receipt_copy_arms_with_its_probe_before_its_first_write(
    tmp_path: Path, lun: Path, target: ReservoirTarget
) -> None:
    """The second copy's probe arms the target's receipts on the session that learned
    the target is ours: every extent of both copies is checked by its receipts (none
    was written before the receipts were armed), and the second sends no arming
    question after its probe."""
    sources = [random_file(tmp_path / f"src{i}.img") for i in range(2)]
    armed_late: list[int] = []

    async def two_copies() -> list[CopySummary]:
        pool: SessionPool[Session] = SessionPool()
        try:
            summaries = []
            for i, src in enumerate(sources):
                opts = options(tmp_path / f"ck{i}.json", pool, verification="receipt")
                run = copy(str(src), target.url(0), opts)
                summaries.append(await _counting_late_arms(run, armed_late))
            return summaries
        finally:
            await pool.close()

    cold, warm = asyncio.run(two_copies())
    extents = SIZE >> 20
    for summary in (cold, warm):
        assert summary.verified and summary.mode == "receipt"
        assert sum(s.by_receipt for s in summary.streams) == extents
    assert warm.sessions_reused == 4
    assert armed_late == [1, 0]  # the cold copy arms after its probe, the warm one with it
    assert sha(lun) == sha(sources[1])


async def _counting_late_arms(
    run: Coroutine[object, object, CopySummary], seen: list[int]
) -> CopySummary:
    """Runs a copy, appending how often it armed receipts after its probe."""
    late = 0
    real = RemoteSide.arm_receipts

    async def counted(side: RemoteSide) -> None:
        nonlocal late
        late += side.hashes and not side._armed
        await real(side)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RemoteSide, "arm_receipts", counted)
        summary = await run
    seen.append(late)
    return summary


def test_a_copy_that_keeps_its_hold_gives_no_session_back(
    tmp_path: Path, lun: Path, target: ReservoirTarget
) -> None:
    source = random_file(tmp_path / "src.img")
    checkpoint = tmp_path / "ck.json"

    async def cancelled_then_resumed() -> tuple[int, list[int], CopySummary, int]:
        pool: SessionPool[Session] = SessionPool()
        try:

            def cancel_at_ten(p: Progress) -> None:
                if p.extents_done >= 10:
                    running.cancel()

            opts = options(checkpoint, pool)
            running = asyncio.create_task(
                copy(str(source), target.url(0), opts, progress=cancel_at_ten)
            )
            with pytest.raises(asyncio.CancelledError):
                await running
            idle, held = pool.stats().idle, await registered_keys(target)
            resumed = await copy(str(source), target.url(0), options(checkpoint, pool, resume=True))
            return idle, held, resumed, pool.stats().idle
        finally:
            await pool.close()

    idle, held, resumed, idle_after = asyncio.run(cancelled_then_resumed())
    assert idle == 0  # registered under the copy's key, which still holds the LUN
    assert len(held) >= 1 and len(set(held)) == 1  # only the copy's key
    assert resumed.verified and sha(lun) == sha(source)
    assert resumed.sessions_reused == 0 and idle_after == 4
