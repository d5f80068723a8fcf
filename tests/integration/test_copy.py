"""``reservoir copy`` against real targets: our builtin target and tgt, on loopback."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reservoir.agent.initiator import RecoveryPolicy, Session
from reservoir.agent.transfer import (
    CopyError,
    CopyOptions,
    CopySummary,
    Progress,
    SourceChangedError,
    cli,
    copy,
    format_summary,
)
from reservoir.agent.transfer._caps import StreamCaps
from reservoir.lab.peers import (
    LOCALHOST,
    ReservoirTarget,
    Tgtd,
    free_port,
    reservoir_command,
    stop_process,
    wait_port,
)

from .gates import WriteGate, copy_cancelled_after

pytestmark = pytest.mark.integration

SIZE = 64 << 20
EXTENT = 4 << 20


def sha(path: Path, length: int = SIZE) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read(length)).hexdigest()


def blank(path: Path, size: int = SIZE) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "source.img"
    path.write_bytes(os.urandom(SIZE))
    return path


@pytest.fixture
def lun(tmp_path: Path) -> Path:
    return blank(tmp_path / "lun0.img")


@pytest.fixture
def ours(tmp_path: Path, lun: Path) -> Iterator[ReservoirTarget]:
    log = tmp_path / "target.log"
    with ReservoirTarget(
        [lun], log_path=log, extra=["--nop-interval", "0"], open_access=True
    ) as target:
        yield target
        alive = target.alive()
    assert alive, log.read_text()[-4000:]


@pytest.fixture
def tgt(tmp_path: Path) -> Iterator[Tgtd]:
    """tgtd with a blank file LUN (LUN 1), skipped where it cannot start here."""
    server = Tgtd(blank(tmp_path / "tgt.img"))
    try:
        server.__enter__()
    except Exception as exc:  # tgtd missing or refusing to start here
        pytest.skip(f"tgtd: {exc}")
    try:
        yield server
    finally:
        server.__exit__(None, None, None)


def options(tmp_path: Path, **kw: object) -> CopyOptions:
    opts = CopyOptions(streams=4, extent_size=EXTENT, checkpoint=tmp_path / "ck.json")
    for name, value in kw.items():
        setattr(opts, name, value)
    return opts


def report(what: str, summary: CopySummary) -> None:
    print(f"\n{what}: {summary.copied_bytes >> 20} MiB at {summary.rate / 1e6:.1f} MB/s")


def test_copy_into_our_target(
    tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget
) -> None:
    summary = asyncio.run(copy(str(source), ours.url(0), options(tmp_path)))
    report("into our target", summary)
    assert summary.verified and summary.copied_bytes == SIZE
    assert summary.mismatches == 0 and summary.resent_bytes == 0
    assert all(s.up and s.extents >= 3 for s in summary.streams)
    assert summary.verified_by == "destination"  # our target hashed its own copy
    assert sha(lun) == sha(source)
    assert summary.source_watched == "its modification and change times"
    assert "source unchanged from before its first read to the end" in format_summary(summary)


def test_a_local_source_goes_to_the_network_by_sendfile(
    tmp_path: Path,
    source: Path,
    lun: Path,
    ours: ReservoirTarget,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every byte of the copy left the source file with sendfile (counted as it
    passes through), none through an extent buffer; the copy is verified."""
    sent: list[int] = []
    real = os.sendfile

    def counted(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        done = real(out_fd, in_fd, offset, count)
        sent.append(done)
        return done

    monkeypatch.setattr(os, "sendfile", counted)
    summary = asyncio.run(copy(str(source), ours.url(0), options(tmp_path)))
    assert summary.verified and summary.resent_bytes == 0
    assert sum(sent) == SIZE
    assert sha(lun) == sha(source)


def test_storage_mode_hashes_each_extent_as_written_and_ends_by_the_targets_read_backs(
    tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget
) -> None:
    """Our target hashes each extent's storage as the copy writes it and keeps the
    digest (HASH RANGE 03h): the check at the end finds every extent unchanged since,
    with nothing read a second time."""
    summary = asyncio.run(copy(str(source), ours.url(0), options(tmp_path)))
    extents = SIZE // EXTENT
    assert summary.verified and summary.mode == "storage" and summary.end_mismatches == 0
    assert sum(s.end_by_read_back for s in summary.streams) == extents
    assert summary.verification.startswith("every extent hashed from the destination's storage")
    assert f"{extents} of {extents} found unchanged since" in summary.verification
    assert sha(lun) == sha(source)


def test_receipt_mode_verifies_every_extent_by_the_targets_receipts(
    tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget
) -> None:
    summary = asyncio.run(copy(str(source), ours.url(0), options(tmp_path, verification="receipt")))
    extents = SIZE // EXTENT
    assert summary.verified and summary.mode == "receipt" and summary.end_mismatches == 0
    assert sum(s.by_receipt for s in summary.streams) == extents
    assert sum(s.end_by_receipt for s in summary.streams) == extents  # nothing read back
    assert f"{extents} of {extents} extents checked by the destination's receipts" in (
        summary.verification
    )
    assert f"after the last extent, {extents} of {extents} checked again" in summary.verification
    assert sha(lun) == sha(source)


def test_receipt_mode_into_tgt_checks_storage(tmp_path: Path, source: Path, tgt: Tgtd) -> None:
    """tgt keeps no receipts: every extent is read back, and the summary says so."""
    opts = options(tmp_path, verification="receipt")
    summary = asyncio.run(copy(str(source), tgt.url(1), opts))
    assert summary.verified and sum(s.by_receipt for s in summary.streams) == 0
    assert summary.verification.startswith("0 of 16 extents checked by the destination's")
    assert "after the last extent, 0 of 16 checked again by those receipts" in (
        summary.verification
    )
    assert sha(tgt.backing) == sha(source)


MUTUAL = ["--chap", "copier:initiator-secret", "--mutual-chap", "target:target-secret"]


def test_copy_with_mutual_chap(tmp_path: Path, source: Path, lun: Path) -> None:
    with ReservoirTarget([lun], extra=["--nop-interval", "0", *MUTUAL]) as target:
        opts = options(
            tmp_path,
            chap=("copier", "initiator-secret"),
            mutual_chap=("target", "target-secret"),
        )
        summary = asyncio.run(copy(str(source), target.url(0), opts))
    assert summary.copied_bytes == SIZE and sha(lun) == sha(source)


def test_the_copy_command_takes_its_chap_secrets_from_a_file_and_the_environment(
    tmp_path: Path,
    source: Path,
    lun: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``reservoir copy`` with neither secret on its command line logs in with both
    (mutual CHAP) and says nothing of a secret where ``ps`` shows it."""
    secret = tmp_path / "copier.secret"
    secret.write_text("initiator-secret\n")
    secret.chmod(0o600)
    monkeypatch.setenv("TARGET_SECRET", "target-secret")
    with ReservoirTarget([lun], extra=["--nop-interval", "0", *MUTUAL]) as target:
        argv = [str(source), target.url(0), "--streams", "2", "--extent-size", str(EXTENT)]
        argv += ["--checkpoint", str(tmp_path / "ckpt.json")]
        argv += ["--chap", "copier", "--chap-secret-file", str(secret)]
        argv += ["--mutual-chap", "target", "--mutual-chap-secret-env", "TARGET_SECRET"]
        assert cli.run(argv) == 0
    assert sha(lun) == sha(source)
    assert "secret is on the command line" not in caplog.text


def test_wrong_mutual_secret_is_refused_and_nothing_written(
    tmp_path: Path, source: Path, lun: Path
) -> None:
    with ReservoirTarget([lun], extra=["--nop-interval", "0", *MUTUAL]) as target:
        opts = options(
            tmp_path, chap=("copier", "initiator-secret"), mutual_chap=("target", "wrong")
        )
        with pytest.raises(CopyError, match=r"(?i)chap|auth"):
            asyncio.run(copy(str(source), target.url(0), opts))
        assert target.alive()
    assert sha(lun) == sha(blank(tmp_path / "zeros.img"))


def test_a_wrong_iqn_lun_or_port_is_named_in_the_copy_s_error_and_the_target_keeps_serving(
    tmp_path: Path,
    source: Path,
    lun: Path,
    ours: ReservoirTarget,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first thing a user gets wrong in a copy's URL comes back in words that
    name it, where it said ``LoginError:``, ``ScsiError: SCSI status 0x02, sense key
    0x5 ASC/ASCQ 0x25/0x00`` or ``ConnectionRefusedError: [Errno 111]`` before."""
    portal = f"127.0.0.1:{ours.port}"
    closed = socket.socket()  # bound, never listening: a connection to it is refused
    closed.bind(("127.0.0.1", 0))
    shut = f"127.0.0.1:{closed.getsockname()[1]}"
    iqn = ours.url(0).split("/")[3]
    cases = [
        (
            f"iscsi://{portal}/iqn.2026-11.org.example:nope/0",
            "destination LUN 0 of iqn.2026-11.org.example:nope: the login at "
            f"{portal} failed: target not found (status 0x0203)",
        ),
        (ours.url(5), f"destination LUN 5 of {iqn}: the target at {portal} has no LUN 5"),
        (
            f"iscsi://{shut}/{iqn}/0",
            f"destination LUN 0 of {iqn}: nothing listens at {shut} (connection refused): "
            "is the target running there?",
        ),
    ]
    with closed:
        for url, message in cases:
            with pytest.raises(CopyError) as refused:
                asyncio.run(copy(str(source), url, options(tmp_path)))
            assert str(refused.value) == message
    with pytest.raises(CopyError) as refused:
        asyncio.run(copy(ours.url(7), str(tmp_path / "out.img"), options(tmp_path)))
    assert str(refused.value) == f"source LUN 7 of {iqn}: the target at {portal} has no LUN 7"
    assert not (tmp_path / "out.img").exists()
    assert "could not all be taken back" not in caplog.text  # nothing was held
    summary = asyncio.run(copy(str(source), ours.url(0), options(tmp_path)))
    assert summary.verified and sha(lun) == sha(source)


def test_copy_into_tgt(tmp_path: Path, source: Path, tgt: Tgtd) -> None:
    summary = asyncio.run(copy(str(source), tgt.url(1), options(tmp_path)))
    report("into tgt", summary)
    assert summary.verified and summary.copied_bytes == SIZE
    assert summary.verified_by == "read-back"  # tgt has no HASH RANGE
    assert sha(tgt.backing) == sha(source)


def test_copy_from_remote_lun(
    tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget
) -> None:
    lun.write_bytes(source.read_bytes())
    out = tmp_path / "out.img"
    summary = asyncio.run(copy(ours.url(0), str(out), options(tmp_path)))
    assert out.stat().st_size == SIZE
    assert sha(out) == sha(source)
    # our target keeps the LUN's change mark (vendor VPD page C0h): the source is watched
    assert summary.verified
    assert summary.source_watched == "its modification and change times, as its target reads them"
    assert (
        summary.root_hash
        == asyncio.run(
            copy(str(source), str(tmp_path / "again.img"), options(tmp_path / "x"))
        ).root_hash
    )


def test_a_remote_source_written_behind_its_target_fails_saying_so(
    tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget
) -> None:
    """The LUN copied from is written (its backing file, not through the target) while
    it is copied: its target's change mark moves, and the copy says so."""
    lun.write_bytes(source.read_bytes())
    written: list[int] = []

    def write_lun(p: Progress) -> None:
        if p.extents_done == 2 and not written:
            with open(lun, "r+b") as f:
                f.write(b"changed behind the target")
            written.append(1)

    with pytest.raises(SourceChangedError, match="changed while it was copied") as failed:
        asyncio.run(
            copy(ours.url(0), str(tmp_path / "out.img"), options(tmp_path), progress=write_lun)
        )
    assert written and "as its target reads them" in str(failed.value)


def test_a_remote_source_written_behind_its_target_is_hashed_by_it_and_a_resume_sends_what_differs(
    tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget
) -> None:
    """Our target hashes the source LUN again where its mark moved (HASH RANGE, no data
    read back): the copy names the one extent that differs, and a resume sends it
    alone."""
    lun.write_bytes(source.read_bytes())
    out = tmp_path / "out.img"
    written: list[int] = []

    def write_lun(p: Progress) -> None:
        if p.extents_done == p.extents_total and not written:
            with open(lun, "r+b") as f:
                f.seek(9 * EXTENT + 5)
                f.write(b"changed behind the target")
            written.append(1)

    opts = options(tmp_path)
    with pytest.raises(SourceChangedError) as failed:
        asyncio.run(copy(ours.url(0), str(out), opts, progress=write_lun))
    assert written
    assert "1 of 16 extents differ from what was sent (source bytes 37748736-41943039)" in (
        str(failed.value)
    ), failed.value
    opts.resume = True
    summary = asyncio.run(copy(ours.url(0), str(out), opts))
    assert summary.verified and summary.skipped_extents == 15 and summary.copied_bytes == EXTENT
    assert sha(out) == sha(lun)


def test_a_resume_after_its_remote_source_changed_asks_its_target_which_extents_differ(
    tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget
) -> None:
    """The source LUN changed in one extent the first run did, between runs: the resume
    has our target hash the done extents again (HASH RANGE over a session of its own),
    skips the ones that match and sends the one that differs."""
    lun.write_bytes(source.read_bytes())
    out = tmp_path / "out.img"
    opts = options(tmp_path, extent_size=1 << 20)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(copy_cancelled_after(10, ours.url(0), str(out), opts))
    done = sorted(int(i) for i in json.loads((tmp_path / "ck.json").read_text())["done"])
    assert len(done) >= 10
    with open(lun, "r+b") as f:
        f.seek(done[4] * (1 << 20) + 99)
        f.write(b"changed between runs")
    opts.resume = True
    summary = asyncio.run(copy(ours.url(0), str(out), opts))
    assert summary.verified and summary.changed_since_checkpoint == 1
    assert summary.skipped_extents == len(done) - 1
    assert sha(out) == sha(lun)


def test_a_remote_source_on_tgt_is_said_not_to_be_watched(
    tmp_path: Path, source: Path, tgt: Tgtd
) -> None:
    """tgt keeps no change mark (it refuses vendor page C0h): the copy is verified, and
    the summary says that nothing watched the source for changes."""
    tgt.backing.write_bytes(source.read_bytes())
    out = tmp_path / "out.img"
    summary = asyncio.run(copy(tgt.url(1), str(out), options(tmp_path)))
    assert summary.verified and summary.source_watched == ""
    assert sha(out) == sha(source)
    assert "source not watched for changes (a remote LUN" in format_summary(summary)


def test_a_remote_source_on_tgt_is_read_again_at_the_end_when_asked(
    tmp_path: Path, source: Path, tgt: Tgtd
) -> None:
    """``--recheck-source``: tgt keeps no change mark, so the copy reads the source
    again at the end and compares every extent with what was sent."""
    tgt.backing.write_bytes(source.read_bytes())
    out = tmp_path / "out.img"
    summary = asyncio.run(copy(tgt.url(1), str(out), options(tmp_path, recheck_source=True)))
    assert summary.verified and summary.source_reread and summary.source_watched == ""
    assert "source read again at the end (its target keeps no change mark" in (
        format_summary(summary)
    )
    assert sha(out) == sha(source)


def test_a_remote_source_on_tgt_written_while_copied_is_found_by_reading_it_again(
    tmp_path: Path, source: Path, tgt: Tgtd
) -> None:
    """Written behind tgt once every extent was sent: the second read names the one
    extent that differs, and a resume sends it alone."""
    tgt.backing.write_bytes(source.read_bytes())
    out = tmp_path / "out.img"
    written: list[int] = []

    def write_lun(p: Progress) -> None:
        if p.extents_done == p.extents_total and not written:
            with open(tgt.backing, "r+b") as f:
                f.seek(3 * EXTENT + 7)
                f.write(b"changed behind tgt")
            written.append(1)

    opts = options(tmp_path, recheck_source=True)
    with pytest.raises(SourceChangedError) as failed:
        asyncio.run(copy(tgt.url(1), str(out), opts, progress=write_lun))
    assert written
    assert "read again at the end differs from what was sent: 1 of 16 extents differ" in (
        str(failed.value)
    )
    assert "(source bytes 12582912-16777215)" in str(failed.value)
    opts.resume = True
    summary = asyncio.run(copy(tgt.url(1), str(out), opts))
    assert summary.verified and summary.source_reread
    assert summary.skipped_extents == 15 and summary.copied_bytes == EXTENT
    assert sha(out) == sha(tgt.backing)


def test_byte_range(tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget) -> None:
    offset, length = 3 << 20, 10 << 20
    summary = asyncio.run(copy(str(source), ours.url(0), options(tmp_path, range=(offset, length))))
    assert summary.copied_bytes == length
    data, want = lun.read_bytes(), source.read_bytes()
    assert data[offset : offset + length] == want[offset : offset + length]
    assert data[:offset] == bytes(offset) and data[offset + length :] == bytes(
        SIZE - offset - length
    )


def test_resume_after_cancel(
    tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget
) -> None:
    opts = options(tmp_path, extent_size=1 << 20)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(copy_cancelled_after(10, str(source), ours.url(0), opts))
    saved = json.loads((tmp_path / "ck.json").read_text())
    done, in_flight = len(saved["done"]), len(saved["in_flight"])
    assert 10 <= done < 64
    opts.resume = True
    summary = asyncio.run(copy(str(source), ours.url(0), opts))
    assert summary.skipped_extents == done
    # those in flight at the stop: written again, or found on the destination already
    assert summary.copied_bytes + summary.found_bytes == SIZE - (done << 20)
    assert summary.found_bytes + summary.resent_bytes <= in_flight << 20
    assert sha(lun) == sha(source)
    assert summary.hold == "reservation" and summary.hold_lapses == []  # held throughout


def test_resume_refuses_another_copy(tmp_path: Path, source: Path, ours: ReservoirTarget) -> None:
    asyncio.run(copy(str(source), ours.url(0), options(tmp_path, range=(0, 8 << 20))))
    with pytest.raises(CopyError, match="another copy"):
        asyncio.run(copy(str(source), ours.url(0), options(tmp_path, resume=True)))


def logins_and_logouts(log: Path) -> tuple[int, int]:
    """Sessions the target logged in and out, from its log."""
    text = log.read_text()
    return text.count("login: "), text.count(": logout (reason")


def test_probe_rides_on_a_stream_session(
    tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget
) -> None:
    summary = asyncio.run(copy(str(source), ours.url(0), options(tmp_path)))
    assert summary.copied_bytes == SIZE and sha(lun) == sha(source)
    # 4 streams, 4 sessions: the LUN was probed on the first of them to log in
    assert logins_and_logouts(tmp_path / "target.log") == (4, 4)


def test_copy_logs_its_phases_from_when_it_was_asked_for(
    tmp_path: Path, source: Path, ours: ReservoirTarget, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="reservoir.copy"):
        asyncio.run(copy(str(source), ours.url(0), options(tmp_path)))
    phases = [
        re.fullmatch(r"copy to .*: (.*) at ([0-9.]+) s", r.getMessage())
        for r in caplog.records
        if r.name == "reservoir.copy"
    ]
    found = [(m.group(1), float(m.group(2))) for m in phases if m is not None]
    assert [what for what, _ in found] == [
        "source and destination open",
        "4 of 4 streams open",
        "every extent written and hashed from the destination's storage",
        "whole destination hashed, equal to the source",
        "flushed",
        "sessions closed",
    ]
    times = [at for _, at in found]
    # counted from the call: opening the sides (a login, the probe) took some time
    assert times[0] > 0 and times == sorted(times)


def test_early_sessions_log_out_when_the_copy_stops_before_its_streams(
    tmp_path: Path, ours: ReservoirTarget
) -> None:
    big = blank(tmp_path / "big.img", 2 * SIZE)
    with pytest.raises(CopyError, match="smaller than"):
        asyncio.run(copy(str(big), ours.url(0), options(tmp_path)))
    assert logins_and_logouts(tmp_path / "target.log") == (4, 4)


def test_probe_has_its_own_session_when_no_stream_logs_in(
    tmp_path: Path, source: Path, ours: ReservoirTarget
) -> None:
    # 192.0.2.1 (TEST-NET-1) is no address of this host: every stream's bind fails
    opts = options(
        tmp_path,
        paths=[f"192.0.2.1=127.0.0.1:{ours.port}"],
        recovery=RecoveryPolicy(attempts=1, first_delay=0.01),
    )
    with pytest.raises(CopyError, match="no stream could connect"):
        asyncio.run(copy(str(source), ours.url(0), opts))
    assert logins_and_logouts(tmp_path / "target.log") == (1, 1)  # the probe's own


def test_too_small_destination(tmp_path: Path, ours: ReservoirTarget) -> None:
    big = blank(tmp_path / "big.img", 2 * SIZE)
    with pytest.raises(CopyError) as caught:
        asyncio.run(copy(str(big), ours.url(0), options(tmp_path)))
    assert str(caught.value) == (
        f"destination LUN 0 of {ours.iqn} is 64 MiB, smaller than the 128 MiB source"
    )


async def refuse(host: str, port: int, local: str | None, sink: object) -> object:
    raise ConnectionRefusedError("refused by the test")


def test_lost_stream_is_carried(
    tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget
) -> None:
    sessions: dict[int, Session] = {}

    def progress(p: Progress) -> None:
        victim = sessions.get(1)
        if p.extents_done >= 4 and victim is not None and victim.transport is not None:
            victim.connector = refuse  # type: ignore[assignment]
            victim.transport.drop()
            del sessions[1]

    opts = options(
        tmp_path,
        extent_size=1 << 20,
        recovery=RecoveryPolicy(attempts=1, first_delay=0.01),
        on_session=sessions.__setitem__,
    )
    summary = asyncio.run(copy(str(source), ours.url(0), opts, progress=progress))
    lost = summary.streams[1]
    assert not lost.up and lost.error
    assert sum(s.up for s in summary.streams) == 3
    assert summary.copied_bytes == SIZE
    assert sha(lun) == sha(source)


def stream_ticks(file: Path) -> int:
    """How many sampler ticks wrote stream records to the telemetry file so far."""
    if not file.exists():
        return 0
    records = [json.loads(line) for line in file.read_text().splitlines()]
    return len({r["time"] for r in records if r["type"] == "stream"})


async def until(what: str, done: Callable[[], bool], copying: asyncio.Task[CopySummary]) -> None:
    """Waits (30 s at most) until ``done()``, or until the copy ended (it failed: the
    caller's ``await`` of it says why)."""
    deadline = time.monotonic() + 30
    while not done() and not copying.done():
        assert time.monotonic() < deadline, f"30 s and still not {what}"
        await asyncio.sleep(0.01)


def test_telemetry_records_every_stream(
    tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget
) -> None:
    file = tmp_path / "telemetry.jsonl"
    gate = WriteGate()  # nothing is written until every stream was sampled
    opts = options(tmp_path, telemetry=file, telemetry_interval=0.1, on_session=gate)

    async def sampled_then_copied() -> CopySummary:
        copying = asyncio.create_task(copy(str(source), ours.url(0), opts))
        # a stream writes only once every stream's session is open (and registered)
        await until("a write held", lambda: bool(gate.held), copying)
        # the first tick after that takes the last baseline, the second has a record
        ticks = stream_ticks(file)
        await until("two ticks more", lambda: stream_ticks(file) >= ticks + 2, copying)
        gate.open()
        return await copying

    summary = asyncio.run(sampled_then_copied())
    assert summary.copied_bytes == SIZE
    records = [json.loads(line) for line in file.read_text().splitlines()]
    streams = [r for r in records if r["type"] == "stream"]
    assert {r["stream"] for r in streams} == {"0", "1", "2", "3"}
    assert all("bits_per_second" in r and r["snd_cwnd"] for r in streams)
    assert any(r["bits_per_second"] for r in streams)
    progress = [r for r in records if r["type"] == "progress"]
    assert progress[-1]["extents_done"] == progress[-1]["extents_total"] == SIZE // EXTENT
    assert progress[-1]["bytes_done"] == SIZE


def test_bind_pairs_with_discovered_portal(
    tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget
) -> None:
    summary = asyncio.run(copy(str(source), ours.url(0), options(tmp_path, binds=["127.0.0.1/8"])))
    assert {s.path for s in summary.streams} == {f"127.0.0.1=127.0.0.1:{ours.port}"}
    assert sha(lun) == sha(source)
    with pytest.raises(CopyError, match=r"--bind 10\.9\.9\.9: the target has no portal on"):
        asyncio.run(copy(str(source), ours.url(0), options(tmp_path, binds=["10.9.9.9"])))


def test_cli_end_to_end(
    tmp_path: Path,
    source: Path,
    lun: Path,
    ours: ReservoirTarget,
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser(prog="reservoir")
    cli.register(parser.add_subparsers(dest="command"))
    argv = ["copy", str(source), ours.url(0), "--streams", "3", "--checkpoint", str(tmp_path / "c")]
    argv += ["--path", f"127.0.0.1=127.0.0.1:{ours.port}"]
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "root hash" in out and "verified" in out
    assert sha(lun) == sha(source)
    args = parser.parse_args(["copy", str(tmp_path / "nope"), ours.url(0)])
    assert args.func(args) == 1
    assert "reservoir copy: source" in capsys.readouterr().err


def test_copy_rides_out_a_kill_and_restart_of_the_target(
    tmp_path: Path, source: Path, lun: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The target restarts with no reservation: the copy's sessions log in again, hear
    POWER ON, RESET, and the copy holds the LUN again and says it was not held from
    the connection's drop to then (it used to say no one could write meanwhile)."""
    port = free_port()
    iqn = "iqn.2026-11.org.reservoir:restart"
    argv = [*reservoir_command(), "target", "serve", "--portal", f"{LOCALHOST}:{port}"]
    argv += ["--iqn", iqn, "--lun", str(lun), "--nop-interval", "0", "--open"]
    procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    wait_port(LOCALHOST, port, proc=procs[0])
    killed = threading.Event()

    def restart() -> None:
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def progress(p: Progress) -> None:
        if p.extents_done >= 8 and not killed.is_set():
            killed.set()
            procs[0].kill()  # kill -9, with writes in flight
            procs[0].wait()
            threading.Timer(1.5, restart).start()

    url = f"iscsi://{LOCALHOST}:{port}/{iqn}/0"
    # paced, so that writes are on the wire when the target dies: on bare loopback a
    # stream is as often between commands (reading, hashing) and nothing is reissued
    caps = StreamCaps(None)
    caps.want({}, {stream: 16_000_000 for stream in range(4)})
    try:
        opts = options(tmp_path, extent_size=1 << 20, stream_caps=caps)
        summary = asyncio.run(copy(str(source), url, opts, progress=progress))
    finally:
        for proc in procs:
            stop_process(proc)
    assert killed.is_set() and len(procs) == 2
    assert summary.copied_bytes == SIZE and all(s.up for s in summary.streams)
    assert summary.resent_bytes > 0  # the writes in flight at the kill, sent again
    assert sha(lun) == sha(source)
    said = format_summary(summary)
    assert "no other initiator could write the destination meanwhile" not in said
    assert "could not release" not in caplog.text  # held again: its CLEAR went through
    (lapse,) = summary.hold_lapses
    lost, back = (float(t) for t in re.findall(r"from ([0-9.]+) s to ([0-9.]+) s", lapse)[0])
    assert back - lost >= 1.5  # from the kill to the copy's hold back, the restart between
    assert "the target restarted or was reset (unit attention 29h/00h)" in lapse


def test_ctrl_c_says_how_far_the_copy_got_and_how_to_go_on(
    tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget
) -> None:
    """SIGINT to ``reservoir copy`` (paced, so that it is mid-copy): exit 130 and a line
    saying what is kept and the two ways on, where it used to stop in silence; the
    resume it names finishes the copy."""
    checkpoint = tmp_path / "ck.json"
    argv = [*reservoir_command(), "-q", "copy", str(source), ours.url(0), "--streams", "2"]
    argv += ["--extent-size", "1M", "--max-rate", "40M", "--checkpoint", str(checkpoint)]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        while not (checkpoint.exists() and json.loads(checkpoint.read_text())["done"]):
            assert proc.poll() is None, "the copy ended before it could be interrupted"
            time.sleep(0.05)  # polls the copy's state: its first extent saved
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        stop_process(proc)
    assert proc.returncode == 130
    said = re.search(r"reservoir copy: interrupted with (\d+) of 64 extents done \(", err)
    assert said is not None, err
    assert f"kept in {checkpoint}; its remote destination stays held for the copy: the same " in err
    assert "with --resume goes on from there, with --release gives the copy up" in err
    assert int(said[1]) >= 1
    resume = options(tmp_path, resume=True, extent_size=1 << 20, streams=2)
    summary = asyncio.run(copy(str(source), ours.url(0), resume))
    assert summary.skipped_extents >= int(said[1]) and sha(lun) == sha(source)


def test_copy_striped_over_two_targets(tmp_path: Path, source: Path) -> None:
    unit = 1 << 20
    luns = [blank(tmp_path / f"member{m}.img", SIZE // 2) for m in range(2)]
    with (
        ReservoirTarget([luns[0]], open_access=True) as first,
        ReservoirTarget([luns[1]], open_access=True) as second,
    ):
        opts = options(tmp_path, streams=2, stripe_unit=unit, extent_size=4 << 20)
        summary = asyncio.run(copy(str(source), [first.url(0), second.url(0)], opts))
    assert summary.copied_bytes == SIZE and summary.verified_by == "destination"
    assert {s.path for s in summary.streams} == {first.url(0), second.url(0)}
    data = source.read_bytes()
    stripes = [data[i : i + unit] for i in range(0, SIZE, unit)]
    assert luns[0].read_bytes() == b"".join(stripes[0::2])
    assert luns[1].read_bytes() == b"".join(stripes[1::2])


def test_striped_copy_refuses_a_too_small_member(tmp_path: Path, source: Path) -> None:
    luns = [blank(tmp_path / "big.img", SIZE), blank(tmp_path / "small.img", SIZE // 4)]
    with (
        ReservoirTarget([luns[0]], open_access=True) as first,
        ReservoirTarget([luns[1]], open_access=True) as second,
    ):
        opts = options(tmp_path, stripe_unit=1 << 20)
        with pytest.raises(CopyError, match="smaller than the 32 MiB its stripe units reach"):
            asyncio.run(copy(str(source), [first.url(0), second.url(0)], opts))


def test_pacing_rates_set_from_outside_reach_every_stream(
    tmp_path: Path, source: Path, lun: Path, ours: ReservoirTarget
) -> None:
    caps = StreamCaps(None)
    caps.want({}, {stream: 2_000_000 for stream in range(4)})  # 2 MB/s a stream
    opts = options(tmp_path, stream_caps=caps, range=(0, 16 << 20), extent_size=1 << 20)
    summary = asyncio.run(copy(str(source), ours.url(0), opts))
    assert caps.applied() == {stream: (None, 2_000_000) for stream in range(4)}
    assert summary.rate < 1.5 * 4 * 2_000_000  # loopback alone runs at hundreds of MB/s
    assert sha(lun, 16 << 20) == sha(source, 16 << 20)
