"""The copy manager with a fake engine: states, pause/resume/cancel, 409s, persistence."""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, get_args

import pytest

from reservoir.agent.control import (
    CopyConflictError,
    CopyCreate,
    CopyJob,
    CopyManager,
    CopyState,
    copies,
)
from reservoir.agent.control.copies import UnknownCopyError
from reservoir.agent.control.models import CapsBase, Verification
from reservoir.agent.transfer import CopyError, CopyOptions, CopySummary, Progress
from reservoir.agent.transfer._engine import VERIFICATIONS

T = TypeVar("T")
SIZE = 8 << 20


def progress(done: int) -> Progress:
    return Progress(done, SIZE, done, 1.0, done >> 20, SIZE >> 20, 2, 2, 1, 1)


def summary(source: str, dest: str) -> CopySummary:
    return CopySummary(source, dest, 0, SIZE, 1 << 20, 1.0, "ab" * 16, True, SIZE, 0, 0, 0, 0, "")


class FakeEngine:
    """Stands for ``transfer.copy``: reports progress, waits for ``release``, and saves
    a checkpoint when cancelled, as the engine does."""

    def __init__(self, *, fail: str | None = None, block: bool = True) -> None:
        self.calls: list[CopyOptions] = []
        self.dests: list[str | Sequence[str]] = []
        self.fail = fail
        self.block = block
        self.release = asyncio.Event()
        self.swallow = 0  # cancellations to swallow, as a buggy engine might

    async def __call__(
        self,
        source: str,
        dest: str | Sequence[str],
        options: CopyOptions,
        *,
        progress: Callable[[Progress], None] | None = None,
    ) -> CopySummary:
        self.calls.append(options)
        self.dests.append(dest)
        if options.telemetry is not None:
            with open(options.telemetry, "a") as f:
                f.write(json.dumps({"type": "progress", "bytes_done": 1 << 20}) + "\n")
        if progress is not None:
            progress(globals()["progress"](1 << 20))
        try:
            if self.block:
                await self.release.wait()
        except asyncio.CancelledError:
            assert options.checkpoint is not None
            options.checkpoint.write_text("{}")
            if self.swallow:
                self.swallow -= 1
                await self.release.wait()
            else:
                raise
        if self.fail:
            raise CopyError(self.fail)
        return summary(source, dest if isinstance(dest, str) else " + ".join(dest))


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def request(**kw: object) -> CopyCreate:
    return CopyCreate.model_validate({"source": "/src.img", "dest": "/dst.img", **kw})


def state(job: CopyJob) -> CopyState:
    """The state now (a call, so that mypy does not keep an earlier narrowing)."""
    return job.state


async def settle(manager: CopyManager, copy_id: str) -> None:
    job = manager.get(copy_id)
    for _ in range(100):
        if job.task is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"copy {copy_id} still {job.state}")


async def started(manager: CopyManager, copy_id: str) -> None:
    for _ in range(100):
        await asyncio.sleep(0.01)
        if manager.get(copy_id).state == CopyState.RUNNING:
            return
    raise AssertionError("the copy did not start")


def test_copy_completes_with_summary_and_full_progress(tmp_path: Path) -> None:
    async def main() -> None:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine(block=False))
        job = manager.create(request())
        assert job.state == CopyState.QUEUED
        await settle(manager, job.id)
        assert state(job) == CopyState.COMPLETED
        assert job.summary is not None and job.summary["verified"] is True
        assert job.progress.done_bytes == job.progress.total_bytes == SIZE
        assert job.runs == 1

    run(main())


def test_engine_error_makes_the_copy_failed_with_its_message(tmp_path: Path) -> None:
    async def main() -> None:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine(fail="dest is too small", block=False))
        job = manager.create(request())
        await settle(manager, job.id)
        assert job.state == CopyState.FAILED
        assert job.last_error == "dest is too small"

    run(main())


def test_pause_then_resume_continues_from_the_same_checkpoint(tmp_path: Path) -> None:
    async def main() -> None:
        engine = FakeEngine()
        manager = CopyManager(tmp_path, copy_fn=engine)
        job = manager.create(request())
        await started(manager, job.id)
        assert (await manager.pause(job.id)).state == CopyState.PAUSED
        assert job.checkpoint.exists()
        manager.resume(job.id)
        await started(manager, job.id)
        engine.release.set()
        await settle(manager, job.id)
        assert job.state == CopyState.COMPLETED and job.runs == 2
        first, second = engine.calls
        assert not first.resume and second.resume
        assert first.checkpoint == second.checkpoint == job.checkpoint

    run(main())


def test_cancel_of_a_running_copy(tmp_path: Path) -> None:
    async def main() -> None:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine())
        job = manager.create(request())
        await started(manager, job.id)
        assert (await manager.cancel(job.id)).state == CopyState.CANCELLED
        assert job.task is None and not job.checkpoint.exists()

    run(main())


def test_cancel_of_a_paused_copy_removes_its_checkpoint(tmp_path: Path) -> None:
    async def main() -> None:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine())
        job = manager.create(request())
        await started(manager, job.id)
        await manager.pause(job.id)
        assert (await manager.cancel(job.id)).state == CopyState.CANCELLED
        assert not job.checkpoint.exists()

    run(main())


def test_cancel_of_a_failed_copy_releases_its_destinations(tmp_path: Path) -> None:
    released: list[tuple[str, str | Sequence[str], Path | None]] = []

    async def release(source: str, dest: str | Sequence[str], options: CopyOptions) -> list[str]:
        released.append((source, dest, options.checkpoint))
        return []

    async def main() -> None:
        engine = FakeEngine(fail="the target went away", block=False)
        manager = CopyManager(tmp_path, copy_fn=engine, release_fn=release)
        job = manager.create(request(dest="iscsi://10.0.0.2/iqn.2026-11.org.x:v/0"))
        await settle(manager, job.id)
        assert state(job) == CopyState.FAILED and released == []  # held for its resume
        assert (await manager.cancel(job.id)).state == CopyState.CANCELLED
        assert released == [("/src.img", "iscsi://10.0.0.2/iqn.2026-11.org.x:v/0", job.checkpoint)]
        assert not job.checkpoint.exists()

    run(main())


def test_pause_of_a_queued_copy(tmp_path: Path) -> None:
    async def main() -> None:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine(), max_running=1)
        first = manager.create(request())
        second = manager.create(request())
        await started(manager, first.id)
        assert second.state == CopyState.QUEUED
        assert (await manager.pause(second.id)).state == CopyState.PAUSED
        await manager.cancel(first.id)

    run(main())


@pytest.mark.parametrize(
    ("verb", "message"),
    [("pause", "cannot pause copy"), ("resume", "cannot resume copy")],
)
def test_transition_not_allowed_from_completed_or_running(
    tmp_path: Path, verb: str, message: str
) -> None:
    async def main() -> None:
        engine = FakeEngine()
        manager = CopyManager(tmp_path, copy_fn=engine)
        job = manager.create(request())
        await started(manager, job.id)
        if verb == "pause":
            engine.release.set()
            await settle(manager, job.id)
            with pytest.raises(CopyConflictError, match=f"{message} .*: it is completed"):
                await manager.pause(job.id)
        else:
            with pytest.raises(CopyConflictError, match=f"{message} .*: it is running"):
                manager.resume(job.id)
            await manager.cancel(job.id)

    run(main())


def test_cancel_of_a_cancelled_copy_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine())
        job = manager.create(request())
        await manager.cancel(job.id)
        with pytest.raises(CopyConflictError, match="it is cancelled"):
            await manager.cancel(job.id)

    run(main())


def test_unknown_copy(tmp_path: Path) -> None:
    manager = CopyManager(tmp_path, copy_fn=FakeEngine(block=False))
    with pytest.raises(UnknownCopyError):
        manager.get("nope")


def test_state_file_is_private_and_keeps_the_request(tmp_path: Path) -> None:
    async def main() -> str:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine(block=False))
        job = manager.create(request(streams=3, range={"offset": 0, "length": 4096}))
        await settle(manager, job.id)
        return job.id

    copy_id = run(main())
    path = tmp_path / "copies" / f"{copy_id}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = CopyManager(tmp_path)
    assert again.load() == 1
    job = again.get(copy_id)
    assert job.state == CopyState.COMPLETED
    assert job.request.streams == 3 and job.request.range is not None
    assert job.summary is not None


def test_a_new_manager_resumes_a_copy_interrupted_by_a_stop(tmp_path: Path) -> None:
    async def first_agent() -> str:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine())
        job = manager.create(request(chap={"user": "u", "secret": "s" * 16}))
        await started(manager, job.id)
        await manager.close()
        assert job.state == CopyState.PAUSED
        return job.id

    copy_id = run(first_agent())

    async def second_agent() -> None:
        engine = FakeEngine(block=False)
        manager = CopyManager(tmp_path, copy_fn=engine)
        manager.load()
        job = manager.get(copy_id)
        assert job.state == CopyState.PAUSED
        manager.resume(copy_id)
        await settle(manager, copy_id)
        assert state(job) == CopyState.COMPLETED
        assert engine.calls[0].resume and engine.calls[0].chap == ("u", "s" * 16)

    run(second_agent())


def completed_copy_file(tmp_path: Path) -> tuple[str, Path, dict[str, Any]]:
    """A copy run to its end by an agent over ``tmp_path``: its id, file and contents."""

    async def main() -> str:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine(block=False))
        job = manager.create(request())
        await settle(manager, job.id)
        return job.id

    copy_id = run(main())
    path = tmp_path / "copies" / f"{copy_id}.json"
    return copy_id, path, json.loads(path.read_text())


def test_a_copy_running_when_the_agent_died_comes_back_paused(tmp_path: Path) -> None:
    copy_id, path, data = completed_copy_file(tmp_path)
    path.write_text(json.dumps({**data, "state": "running"}))  # as a killed agent left it
    manager = CopyManager(tmp_path)
    manager.load()
    job = manager.get(copy_id)
    assert job.state == CopyState.PAUSED
    assert job.last_error == "the agent stopped while the copy was running"


def test_the_loop_ending_under_a_running_copy_leaves_it_paused(tmp_path: Path) -> None:
    async def main() -> None:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine())
        job = manager.create(request())
        await started(manager, job.id)  # asyncio.run then cancels the task

    run(main())
    manager = CopyManager(tmp_path)
    manager.load()
    assert [j.state for j in manager.all()] == [CopyState.PAUSED]


def test_the_verification_mode_reaches_the_engine_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    async def first_agent() -> str:
        engine = FakeEngine()
        manager = CopyManager(tmp_path, copy_fn=engine)
        job = manager.create(request(verification="receipt"))
        await started(manager, job.id)
        await manager.close()
        assert engine.calls[0].verification == "receipt"
        return job.id

    copy_id = run(first_agent())
    saved = json.loads((tmp_path / "copies" / f"{copy_id}.json").read_text())
    assert saved["request"]["verification"] == "receipt"

    async def second_agent() -> None:
        engine = FakeEngine(block=False)
        manager = CopyManager(tmp_path, copy_fn=engine)
        manager.load()
        manager.resume(copy_id)
        await settle(manager, copy_id)
        assert engine.calls[0].resume and engine.calls[0].verification == "receipt"

    run(second_agent())


def test_a_copy_saved_before_the_verification_mode_verifies_from_storage(
    tmp_path: Path,
) -> None:
    copy_id, path, data = completed_copy_file(tmp_path)
    del data["request"]["verification"]  # as an agent before the field wrote it
    path.write_text(json.dumps(data))
    manager = CopyManager(tmp_path)
    manager.load()
    assert manager.get(copy_id).request.verification == "storage"


def test_the_api_modes_are_the_engines() -> None:
    assert get_args(Verification) == VERIFICATIONS


def test_a_corrupt_state_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "copies").mkdir(parents=True)
    (tmp_path / "copies" / "bad.json").write_text("{not json")
    assert CopyManager(tmp_path).load() == 0


def test_caps_for_a_stream_the_copy_does_not_have_are_refused(tmp_path: Path) -> None:
    async def main() -> None:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine())
        job = manager.create(request(streams=2))
        manager.set_caps(job.id, CapsBase(stream_pacing_rates={1: 1000}))
        assert job.caps is not None and job.caps.stream_pacing_rates == {1: 1000}
        with pytest.raises(CopyConflictError, match="no stream 2"):
            manager.set_caps(job.id, CapsBase(stream_pacing_rates={2: 1000}))
        await manager.cancel(job.id)

    run(main())


def test_cwnd_caps_need_a_cap_mechanism(tmp_path: Path) -> None:
    async def main() -> None:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine())
        job = manager.create(request(streams=2))
        with pytest.raises(CopyConflictError, match="applies no cwnd caps"):
            manager.set_caps(job.id, CapsBase(stream_cwnd_caps={1: 40}))
        await manager.cancel(job.id)

    run(main())


class NoCapper:
    mechanism = "test"

    def set(self, sock: object, segments: int) -> None:
        raise AssertionError("no socket in this test")

    clear = refresh = set


def test_caps_of_a_running_copy_reach_its_streams(tmp_path: Path) -> None:
    async def main() -> None:
        engine = FakeEngine()
        manager = CopyManager(tmp_path, copy_fn=engine)
        manager.capper = NoCapper()  # type: ignore[assignment]
        job = manager.create(request(streams=2))
        manager.set_caps(job.id, CapsBase(stream_cwnd_caps={0: 30}))
        await started(manager, job.id)
        caps = engine.calls[-1].stream_caps
        assert caps is not None and caps is job.stream_caps and caps.cwnd == {0: 30}
        manager.set_caps(job.id, CapsBase(stream_cwnd_caps={1: 20}, stream_pacing_rates={0: 9}))
        assert (caps.cwnd, caps.pacing) == ({1: 20}, {0: 9})
        await manager.cancel(job.id)
        assert job.stream_caps is None

    run(main())


def test_engine_telemetry_goes_to_a_file_per_copy(tmp_path: Path) -> None:
    async def main() -> None:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine(block=False))
        job = manager.create(request())
        await settle(manager, job.id)
        assert manager.telemetry(job.id) == [{"type": "progress", "bytes_done": 1 << 20}]
        assert manager.telemetry_path(job.id).parent == tmp_path / "telemetry"

    run(main())


def test_pause_cancels_again_when_the_engine_swallows_a_cancel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(copies, "STOP_RETRY", 0.05)

    async def main() -> None:
        engine = FakeEngine()
        engine.swallow = 1
        manager = CopyManager(tmp_path, copy_fn=engine)
        job = manager.create(request())
        await started(manager, job.id)
        assert (await manager.pause(job.id)).state == CopyState.PAUSED

    run(main())


def test_pause_of_a_copy_that_completes_meanwhile_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(copies, "STOP_RETRY", 0.05)

    async def main() -> None:
        engine = FakeEngine()
        engine.swallow = 1
        manager = CopyManager(tmp_path, copy_fn=engine)
        job = manager.create(request())
        await started(manager, job.id)
        asyncio.get_running_loop().call_later(0.01, engine.release.set)
        with pytest.raises(CopyConflictError, match="ended completed before it could be paused"):
            await manager.pause(job.id)

    run(main())


def test_several_destinations_reach_the_engine_striped(tmp_path: Path) -> None:
    async def main() -> None:
        engine = FakeEngine(block=False)
        manager = CopyManager(tmp_path, copy_fn=engine)
        job = manager.create(request(dest=["/d0.img", "/d1.img"], stripe_unit=1 << 20))
        await settle(manager, job.id)
        assert state(job) == CopyState.COMPLETED
        assert engine.dests == [["/d0.img", "/d1.img"]]
        assert engine.calls[0].stripe_unit == 1 << 20

    run(main())


def test_one_destination_still_reaches_the_engine_as_a_string(tmp_path: Path) -> None:
    async def main() -> None:
        engine = FakeEngine(block=False)
        manager = CopyManager(tmp_path, copy_fn=engine)
        await settle(manager, manager.create(request()).id)
        assert engine.dests == ["/dst.img"]

    run(main())


def test_a_lost_copy_created_again_under_its_id_resumes_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        engine = FakeEngine()
        manager = CopyManager(tmp_path, copy_fn=engine)
        job = manager.create(request(id="t1-leg0"))
        await started(manager, job.id)
        await manager.pause(job.id)  # the fake engine writes its checkpoint
        (tmp_path / "copies" / "t1-leg0.json").unlink()  # the agent loses the copy
        again = CopyManager(tmp_path, copy_fn=engine)
        assert again.load() == 0
        job = again.create(request(id="t1-leg0"))
        await started(again, job.id)
        assert engine.calls[-1].resume is True
        await again.cancel(job.id)

    run(main())


def test_an_id_given_twice_is_the_same_copy_or_refused(tmp_path: Path) -> None:
    async def main() -> None:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine(block=False))
        job = manager.create(request(id="t2-leg0"))
        assert manager.existing(request(id="t2-leg0")) is job
        assert manager.existing(request(id="t3-leg0")) is None
        with pytest.raises(CopyConflictError, match="another request"):
            manager.existing(request(id="t2-leg0", streams=9))
        with pytest.raises(CopyConflictError, match="exists"):
            manager.create(request(id="t2-leg0"))
        await settle(manager, job.id)

    run(main())


def test_a_wait_answers_when_the_copy_leaves_its_state_and_not_before(tmp_path: Path) -> None:
    async def main() -> None:
        engine = FakeEngine()
        manager = CopyManager(tmp_path, copy_fn=engine)
        job = manager.create(request())
        await started(manager, job.id)
        waiting = asyncio.create_task(manager.wait(job.id, CopyState.RUNNING, 30))
        await asyncio.sleep(0.1)
        assert not waiting.done()  # its progress changed nothing: still running
        engine.release.set()
        ended = await asyncio.wait_for(waiting, 5)
        assert ended.state == CopyState.COMPLETED
        # a wait for a state the copy is not in answers at once; one whose time
        # passes answers with the copy as it is
        assert (await manager.wait(job.id, CopyState.RUNNING, 30)).state == CopyState.COMPLETED
        assert (await manager.wait(job.id, CopyState.COMPLETED, 0.05)) is job
        with pytest.raises(UnknownCopyError):
            await manager.wait("nope", CopyState.RUNNING, 1)

    run(main())


def test_a_stopping_agent_answers_every_wait_at_once(tmp_path: Path) -> None:
    async def main() -> None:
        manager = CopyManager(tmp_path, copy_fn=FakeEngine())
        job = manager.create(request())
        await started(manager, job.id)
        waiting = asyncio.create_task(manager.wait(job.id, CopyState.RUNNING, 30))
        await asyncio.sleep(0.05)
        manager.stop_waits()
        assert (await asyncio.wait_for(waiting, 5)).state == CopyState.RUNNING
        assert (await asyncio.wait_for(manager.wait(job.id, CopyState.RUNNING, 30), 5)) is job
        await manager.close()

    run(main())
