"""A copy is trusted when it says "verified": each device once, the destination held
for the copy alone, and the whole destination checked at the end. Real targets on
loopback, real sessions."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import logging
import os
import re
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.agent.control.copies import CopyManager
from reservoir.agent.control.models import CapsBase, CopyCreate, CopyState
from reservoir.agent.initiator import (
    WRITE_EXCLUSIVE_REGISTRANTS_ONLY,
    ScsiError,
    Session,
    pr_clear,
    pr_read_keys,
    pr_read_reservation,
    pr_register,
    pr_reserve,
)
from reservoir.agent.transfer import (
    CopyError,
    CopyOptions,
    CopySummary,
    Progress,
    SourceChangedError,
    copy,
)
from reservoir.agent.transfer import _endpoints as endpoints
from reservoir.agent.transfer import _hold as hold
from reservoir.agent.transfer._stream import PieceHasher
from reservoir.agent.transfer._summary import format_summary
from reservoir.lab.peers import ReservoirTarget, reservoir_command

from .gates import WriteGate, copy_cancelled_after

pytestmark = pytest.mark.integration

SIZE = 64 << 20
EXTENT = 4 << 20
RESERVATION_CONFLICT = 0x18
OTHER = "iqn.2026-11.org.example:another-host"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "source.img"
    path.write_bytes(os.urandom(SIZE))
    return path


@pytest.fixture
def lun(tmp_path: Path) -> Path:
    path = tmp_path / "lun0.img"
    path.write_bytes(b"\x5a" * SIZE)  # a pattern a lost write would show
    return path


@pytest.fixture
def target(tmp_path: Path, lun: Path) -> Iterator[ReservoirTarget]:
    with ReservoirTarget([lun], log_path=tmp_path / "target.log", open_access=True) as t:
        yield t


def options(tmp_path: Path, **kw: object) -> CopyOptions:
    opts = CopyOptions(streams=2, extent_size=EXTENT, checkpoint=tmp_path / "ck.json")
    for name, value in kw.items():
        setattr(opts, name, value)
    return opts


def test_a_striped_copy_into_one_lun_under_two_host_names_is_refused_before_writing(
    tmp_path: Path, source: Path, lun: Path, target: ReservoirTarget
) -> None:
    before = sha(lun)
    by_ip = target.url(0)
    by_name = by_ip.replace("127.0.0.1", "localhost")
    opts = options(tmp_path, stripe_unit=4 << 20)
    with pytest.raises(CopyError, match="are the same device") as refused:
        asyncio.run(copy(str(source), [by_ip, by_name], opts))
    assert by_ip in str(refused.value) and by_name in str(refused.value)
    assert sha(lun) == before


def test_a_striped_copy_into_lun_0_and_lun_00_is_refused_before_writing(
    tmp_path: Path, source: Path, lun: Path, target: ReservoirTarget
) -> None:
    before = sha(lun)
    zero, double = target.url(0), target.url(0)[:-1] + "00"
    with pytest.raises(CopyError, match="are the same device"):
        asyncio.run(copy(str(source), [zero, double], options(tmp_path, stripe_unit=4 << 20)))
    assert sha(lun) == before


def test_a_copy_from_the_file_backing_its_destination_lun_is_refused(
    tmp_path: Path, lun: Path, target: ReservoirTarget
) -> None:
    before = sha(lun)
    with pytest.raises(CopyError, match="are the same device"):
        asyncio.run(copy(str(lun), target.url(0), options(tmp_path)))
    assert sha(lun) == before


def test_a_new_destination_file_is_no_wider_than_its_source(tmp_path: Path) -> None:
    src = tmp_path / "secret.img"
    src.write_bytes(os.urandom(1 << 20))
    src.chmod(0o600)
    dest = tmp_path / "copy.img"
    asyncio.run(copy(str(src), str(dest), options(tmp_path, extent_size=1 << 20)))
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert dest.read_bytes() == src.read_bytes()


async def other_host_write(target: ReservoirTarget) -> None:
    """One block written by an initiator that is not the copy's."""
    async with await Session.open(
        "127.0.0.1", target.port, target.iqn, initiator_name=OTHER
    ) as other:
        await other.write(0, 0, b"\xee" * 512)


async def assert_kept_out(target: ReservoirTarget) -> None:
    """Another initiator's write gets RESERVATION CONFLICT: the LUN is held."""
    with pytest.raises(ScsiError) as conflict:
        await other_host_write(target)
    assert conflict.value.status == RESERVATION_CONFLICT


async def paused_copy(source: Path, url: str, opts: CopyOptions, extents: int) -> None:
    """Runs a copy until ``extents`` extents are done, then cancels it (a pause: the
    checkpoint is saved, the destination stays held)."""
    reached = asyncio.Event()

    def seen(p: Progress) -> None:
        if p.extents_done >= extents:
            reached.set()

    task = asyncio.create_task(copy(str(source), url, opts, progress=seen))
    waiter = asyncio.create_task(reached.wait())
    done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    assert waiter in done, "the copy ended before it could be paused"
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_the_destination_is_held_through_a_pause_and_released_when_the_copy_ends(
    tmp_path: Path, source: Path, lun: Path, target: ReservoirTarget
) -> None:
    url = target.url(0)

    async def scenario() -> CopySummary:
        await paused_copy(source, url, options(tmp_path, streams=1, depth=1), extents=2)
        await assert_kept_out(target)
        summary = await copy(str(source), url, options(tmp_path, resume=True))
        await other_host_write(target)  # released: anyone may write again
        return summary

    summary = asyncio.run(scenario())
    assert summary.hold == "reservation" and summary.verified and summary.skipped_extents >= 2
    data = lun.read_bytes()
    assert data[512:] == source.read_bytes()[512:] and data[:512] == b"\xee" * 512


async def reservations(target: ReservoirTarget) -> tuple[list[int], tuple[int, int] | None]:
    """The LUN's registered keys and reservation, as another initiator reads them."""
    async with await Session.open(
        "127.0.0.1", target.port, target.iqn, initiator_name=OTHER
    ) as other:
        return await pr_read_keys(other, 0), await pr_read_reservation(other, 0)


@pytest.mark.parametrize("refusal", ["two-spellings", "own-backing-file", "no-checkpoint"])
def test_a_copy_refused_after_its_claim_leaves_nothing_on_the_lun(
    tmp_path: Path, source: Path, lun: Path, target: ReservoirTarget, refusal: str
) -> None:
    """The hold is claimed in the probe's round trip: a copy refused once the probe
    answered takes it back, and the LUN is as free and as unwritten as before."""
    before = sha(lun)
    url = target.url(0)
    source_text, dests, opts = str(source), [url], options(tmp_path)
    if refusal == "two-spellings":
        dests.append(url.replace("127.0.0.1", "localhost"))
        opts.stripe_unit = 4 << 20
    elif refusal == "own-backing-file":
        source_text = str(lun)
    else:
        opts.resume = True
    with pytest.raises(CopyError, match=r"same device|no checkpoint"):
        asyncio.run(copy(source_text, dests, opts))
    assert asyncio.run(reservations(target)) == ([], None)
    asyncio.run(other_host_write(target))  # nobody holds it
    assert sha(lun) != before and lun.read_bytes()[512:] == b"\x5a" * (SIZE - 512)


def test_a_destination_another_initiator_holds_keeps_only_their_hold(
    tmp_path: Path, source: Path, lun: Path, target: ReservoirTarget
) -> None:
    theirs = 0x77

    async def scenario() -> tuple[list[int], tuple[int, int] | None]:
        async with await Session.open(
            "127.0.0.1", target.port, target.iqn, initiator_name=OTHER
        ) as other:
            await pr_register(other, 0, theirs)
            await pr_reserve(other, 0, theirs, WRITE_EXCLUSIVE_REGISTRANTS_ONLY)
            with pytest.raises(CopyError, match="reserved by another initiator"):
                await copy(str(source), target.url(0), options(tmp_path))
            return await pr_read_keys(other, 0), await pr_read_reservation(other, 0)

    before = sha(lun)
    assert asyncio.run(scenario()) == ([theirs], (theirs, WRITE_EXCLUSIVE_REGISTRANTS_ONLY))
    assert sha(lun) == before


def test_a_resume_refused_after_its_claim_keeps_the_earlier_runs_hold(
    tmp_path: Path, source: Path, target: ReservoirTarget
) -> None:
    url = target.url(0)
    first = options(tmp_path, streams=1, depth=1)
    key = hold.hold_key(str(source), [url], first.checkpoint)

    async def scenario() -> None:
        await paused_copy(source, url, first, extents=1)
        other_plan = options(tmp_path, resume=True, extent_size=2 * EXTENT)
        with pytest.raises(CopyError, match="for another copy"):
            await copy(str(source), url, other_plan)
        await assert_kept_out(target)
        keys, reservation = await reservations(target)
        assert set(keys) == {key} and reservation == (key, WRITE_EXCLUSIVE_REGISTRANTS_ONLY)

    asyncio.run(scenario())


def test_a_copy_into_our_target_writes_from_every_stream_without_asking_first(
    tmp_path: Path,
    source: Path,
    lun: Path,
    target: ReservoirTarget,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Our target lets every registrant write under the copy's reservation (as SPC
    says, unlike LIO): the streams that do not hold it write without the harmless
    COMPARE AND WRITE that asks other targets whether they may (a round trip); another
    initiator is still kept out."""
    asked: list[int] = []

    async def writes_allowed(session: Session, lun: int, block_size: int) -> bool:
        asked.append(lun)
        return await allowed(session, lun, block_size)

    allowed = hold.writes_allowed
    monkeypatch.setattr(endpoints, "writes_allowed", writes_allowed)
    url = target.url(0)

    async def scenario() -> None:
        await paused_copy(source, url, options(tmp_path, streams=2, depth=1), extents=2)
        await assert_kept_out(target)

    asyncio.run(scenario())
    summary = asyncio.run(copy(str(source), url, options(tmp_path, resume=True)))
    assert summary.verified and summary.hold == "reservation" and asked == []
    assert lun.read_bytes() == source.read_bytes()
    assert sum(1 for s in summary.streams if s.extents) == 2  # both streams wrote


def test_a_second_copy_into_a_held_destination_is_refused(
    tmp_path: Path, source: Path, lun: Path, target: ReservoirTarget
) -> None:
    other = tmp_path / "other.img"
    other.write_bytes(os.urandom(SIZE))
    url = target.url(0)

    async def scenario() -> None:
        await paused_copy(source, url, options(tmp_path, streams=1, depth=1), extents=1)
        second = options(tmp_path, checkpoint=tmp_path / "other-ck.json")
        with pytest.raises(CopyError, match="reserved by another initiator"):
            await copy(str(other), url, second)

    asyncio.run(scenario())
    assert other.read_bytes()[:EXTENT] != lun.read_bytes()[:EXTENT]


def test_an_extent_changed_behind_a_paused_copy_is_found_and_sent_again(
    tmp_path: Path, source: Path, lun: Path, target: ReservoirTarget
) -> None:
    url = target.url(0)

    async def scenario() -> CopySummary:
        await paused_copy(source, url, options(tmp_path, streams=1, depth=1), extents=2)
        with open(lun, "r+b") as f:  # the first extent, done by the first run, rots
            f.write(b"\0" * 4096)
        return await copy(str(source), url, options(tmp_path, resume=True))

    summary = asyncio.run(scenario())
    assert sha(lun) == sha(source)
    assert summary.end_mismatches == 1 and summary.verified
    assert "hashed by the destination" in summary.verification


def test_a_cancelled_copy_of_the_agent_releases_its_destination(
    tmp_path: Path, source: Path, target: ReservoirTarget
) -> None:
    async def scenario() -> None:
        manager = CopyManager(tmp_path / "agent")
        paced = CapsBase(stream_pacing_rates={0: 16 << 20})  # 4 s for the whole copy
        request = CopyCreate(
            source=str(source), dest=target.url(0), streams=1, extent_size=EXTENT, caps=paced
        )
        job = manager.create(request)
        while job.progress.done_bytes < EXTENT:  # held once its first extent is done
            assert job.state in (CopyState.QUEUED, CopyState.RUNNING), job.last_error
            await asyncio.sleep(0.01)
        with pytest.raises(ScsiError):
            await other_host_write(target)
        await manager.cancel(job.id)
        await other_host_write(target)

    asyncio.run(scenario())


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs of this test's own, unmounted after it."""
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_destination_lun_out_of_space_is_said_in_words(
    tmp_path: Path, source: Path, small_fs: Path
) -> None:
    thin = small_fs / "thin.img"
    with open(thin, "wb") as f:
        f.truncate(SIZE)  # 64 MiB promised, 8 MiB there
    with (
        ReservoirTarget([thin], log_path=tmp_path / "full.log", open_access=True) as full,
        pytest.raises(CopyError) as failed,
    ):
        asyncio.run(copy(str(source), full.url(0), options(tmp_path)))
    want = f"destination LUN {full.url(0)} is out of space (its backing volume is full)"
    assert str(failed.value) == want
    said = (tmp_path / "full.log").read_text()
    assert "ERROR" in said and "out of space: the LUN's backing volume is full" in said


def test_a_read_only_destination_is_refused_before_writing_and_left_unheld(
    tmp_path: Path, source: Path, lun: Path
) -> None:
    """A LUN its target exports read-only (MODE SENSE's WP) is refused in words before
    any write, its claim taken back; it failed on its first write with WRITE PROTECTED
    and stayed reserved by a copy that could never go on."""
    before = sha(lun)
    log = tmp_path / "ro.log"
    with ReservoirTarget([lun], log_path=log, extra=["--read-only"], open_access=True) as ro:
        with pytest.raises(CopyError) as refused:
            asyncio.run(copy(str(source), ro.url(0), options(tmp_path)))
        assert str(refused.value) == (
            f"destination LUN 0 of {ro.iqn} is write-protected: its target exports it "
            "read-only (MODE SENSE reports WP); nothing was written"
        )
        assert asyncio.run(reservations(ro)) == ([], None)
    assert sha(lun) == before


def test_a_local_destination_out_of_space_is_said_in_words_and_nothing_else_is_logged(
    tmp_path: Path, source: Path, small_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every stream's write fails with ENOSPC: one line saying so (it said
    ``StorageError: [Errno 28] write failed: ...``), and none of asyncio's "Future
    exception was never retrieved" for the writes in flight when the copy stopped."""
    dest = small_fs / "copy.img"
    with pytest.raises(CopyError) as failed:
        asyncio.run(copy(str(source), str(dest), options(tmp_path, streams=4)))
    assert str(failed.value) == (
        f"destination {dest} is out of space (No space left on device): free some, or "
        "copy to a volume with room, and resume to go on from the checkpoint"
    )
    gc.collect()  # an unretrieved failure is logged as its future goes
    assert "never retrieved" not in caplog.text


# whichever read met the end first says so: a read into memory, the hashing of an
# extent sent from the file, or its send (sendfile) finding the file short
SHRUNK_READS = (
    "read failed: no progress \\(end of file\\?\\)",
    "read failed: unexpected end of file",
    "the file ends before byte [0-9]+",
)


def assert_says_it_shrank(source: Path, message: str) -> None:
    why = "|".join(SHRUNK_READS)
    assert re.fullmatch(
        f"the source {re.escape(str(source))} could not be read \\(({why})\\): "
        "it is now 4 MiB; a source must not shrink while it is copied",
        message,
    ), message


def test_a_source_that_shrinks_during_the_copy_fails_in_words_without_a_traceback(
    tmp_path: Path, source: Path, target: ReservoirTarget, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        def shrink(p: Progress) -> None:
            if p.extents_done == 1:
                os.truncate(source, EXTENT)  # the rest of the source is gone

        await copy(str(source), target.url(0), options(tmp_path, streams=4), progress=shrink)

    with caplog.at_level(logging.DEBUG), pytest.raises(CopyError) as failed:
        asyncio.run(scenario())
    gc.collect()  # a future's unretrieved exception is logged when it is collected
    assert_says_it_shrank(source, str(failed.value))
    assert [
        r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR
    ] == []


def test_a_source_that_shrinks_between_hash_and_send_fails_in_words(
    tmp_path: Path,
    source: Path,
    target: ReservoirTarget,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The source is cut short after its third extent was hashed and before it is
    sent from the file: the copy fails saying so, and nothing is sent in its place."""
    hashed = 0
    real = PieceHasher.digests

    def then_shrink(self: PieceHasher) -> tuple[bytes, bytes | None]:
        nonlocal hashed
        hashed += 1
        if hashed == 3:
            os.truncate(source, EXTENT)
        return real(self)

    monkeypatch.setattr(PieceHasher, "digests", then_shrink)
    with caplog.at_level(logging.DEBUG), pytest.raises(CopyError) as failed:
        asyncio.run(copy(str(source), target.url(0), options(tmp_path)))
    assert_says_it_shrank(source, str(failed.value))
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


def test_copy_release_ends_the_hold_of_a_copy_given_up(
    tmp_path: Path, source: Path, target: ReservoirTarget
) -> None:
    url = target.url(0)
    opts = options(tmp_path, streams=1, depth=1)
    asyncio.run(paused_copy(source, url, opts, extents=1))
    with pytest.raises(ScsiError):
        asyncio.run(other_host_write(target))
    command = [*reservoir_command(), "copy", str(source), url, "--release"]
    command += ["--checkpoint", str(opts.checkpoint)]
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, f"released {url}\n"), done.stderr
    asyncio.run(other_host_write(target))  # anyone may write again
    again = subprocess.run(command, check=False, capture_output=True, text=True)
    assert again.stdout == "this copy holds none of its destinations\n"


def touch_every_extent(path: Path, extent: int = EXTENT) -> None:
    """One byte of each extent changed in place: whatever a copy read is stale now."""
    for offset in range(0, SIZE, extent):
        flip_byte(path, offset)


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(1)
        f.seek(offset)
        f.write(bytes([old[0] ^ 0xFF]))


def test_a_source_written_while_it_is_copied_fails_saying_so(
    tmp_path: Path, source: Path, lun: Path, target: ReservoirTarget
) -> None:
    """A copy whose source is written under it does not end "verified, equal to the
    source": the destination holds each extent as it was read, not the source as it
    is at the end."""
    changed: list[int] = []

    def write_source(p: Progress) -> None:
        if p.extents_done == 2 and not changed:
            touch_every_extent(source)
            changed.append(p.extents_done)

    with pytest.raises(SourceChangedError) as failed:
        asyncio.run(copy(str(source), target.url(0), options(tmp_path), progress=write_source))
    assert changed
    message = str(failed.value)
    assert "changed while it was copied" in message and str(source) in message, message
    assert "modification" in message, message  # what moved: the file's times


def test_a_resume_after_its_source_changed_sends_what_changed(
    tmp_path: Path, source: Path, lun: Path, target: ReservoirTarget
) -> None:
    """The extents an earlier run did are not taken on its word once the source has
    changed since: the source is hashed again, and every extent that differs is sent;
    the destination then equals the source as it is."""
    opts = options(tmp_path, extent_size=1 << 20)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(copy_cancelled_after(10, str(source), target.url(0), opts))
    done = json.loads((tmp_path / "ck.json").read_text())["done"]
    touch_every_extent(source, 1 << 20)
    opts.resume = True
    summary = asyncio.run(copy(str(source), target.url(0), opts))
    assert summary.verified and summary.skipped_extents == 0
    assert summary.changed_since_checkpoint == len(done) >= 10
    assert sha(lun) == sha(source)


def test_a_source_written_while_it_is_copied_names_what_differs_and_a_resume_sends_that(
    tmp_path: Path, source: Path, lun: Path, target: ReservoirTarget
) -> None:
    """The failing copy hashes its local source again and names the extents that differ
    from what it sent; it keeps its destination held and its checkpoint forgets just
    those, so the resume sends one extent and skips the other 15."""
    written: list[int] = []

    def write_source(p: Progress) -> None:
        if p.extents_done == p.extents_total and not written:
            flip_byte(source, 5 * EXTENT + 100)  # after every extent was sent
            written.append(p.extents_done)

    opts = options(tmp_path)
    with pytest.raises(SourceChangedError) as failed:
        asyncio.run(copy(str(source), target.url(0), opts, progress=write_source))
    assert written == [16]
    message = str(failed.value)
    assert "1 of 16 extents differ from what was sent (source bytes 20971520-25165823)" in (
        message
    ), message
    assert "resume to send just those" in message, message
    asyncio.run(assert_kept_out(target))  # held for the resume, as after any failure
    opts.resume = True
    summary = asyncio.run(copy(str(source), target.url(0), opts))
    assert summary.verified and summary.skipped_extents == 15
    assert summary.copied_bytes == EXTENT and summary.changed_since_checkpoint == 0
    assert sha(lun) == sha(source)


def test_a_source_touched_but_not_changed_while_it_is_copied_is_hashed_again_and_verified(
    tmp_path: Path, source: Path, lun: Path, target: ReservoirTarget
) -> None:
    """A write of the same bytes (or a touch) moves the mark, not the data: the source
    hashed again at the end equals what was sent, and the copy says so."""

    def rewrite_source(p: Progress) -> None:
        if p.extents_done == 2:
            with open(source, "r+b") as f:
                first = f.read(4096)
                f.seek(0)
                f.write(first)

    summary = asyncio.run(
        copy(str(source), target.url(0), options(tmp_path), progress=rewrite_source)
    )
    assert summary.verified and summary.source_rehashed
    assert "then hashed again at the end: every extent equal" in format_summary(summary)
    assert sha(lun) == sha(source)


def test_a_resume_after_its_source_changed_in_one_extent_sends_only_that_extent(
    tmp_path: Path, source: Path, lun: Path, target: ReservoirTarget
) -> None:
    """Between runs the source changed in one extent the first run did: the resume
    hashes the local source again and sends that extent, skipping the others it did
    (not looking them up on the destination)."""
    opts = options(tmp_path, extent_size=1 << 20)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(copy_cancelled_after(10, str(source), target.url(0), opts))
    done = sorted(int(i) for i in json.loads((tmp_path / "ck.json").read_text())["done"])
    assert len(done) >= 10
    flip_byte(source, done[3] * (1 << 20) + 7)
    opts.resume = True
    summary = asyncio.run(copy(str(source), target.url(0), opts))
    assert summary.verified and summary.changed_since_checkpoint == 1
    assert summary.skipped_extents == len(done) - 1
    assert sha(lun) == sha(source)


# ---------------------------------------------------------------- a hold lost while the copy writes
# (agent/transfer/_hold_watch): another initiator's CLEAR is answered by holding the LUN
# again, and said in the summary; a hold another initiator takes stops the copy. The
# copy's writes are held at a known point by a WriteGate while the other initiator acts.
# (A target killed and restarted under a copy: test_copy.py.)

WATCHED_EXTENT = 1 << 20
OTHER_KEY = 0x0BAD_C0FFEE


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


async def copy_with_another_initiator(
    tmp_path: Path, source: Path, target: ReservoirTarget, *, take: bool
) -> CopySummary:
    """A copy whose writes are held after 8 MiB while the other initiator acts."""
    gate = WriteGate(passing=8 * WATCHED_EXTENT)
    opts = options(tmp_path, extent_size=WATCHED_EXTENT, on_session=gate)
    running = asyncio.create_task(copy(str(source), target.url(0), opts))
    while len(gate.held) < 2:  # both streams wait at the gate: the copy holds the LUN
        assert not running.done(), "the copy ended before its writes were held"
        await asyncio.sleep(0.01)
    await other_initiator(target, take=take)
    gate.open()
    return await running


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
