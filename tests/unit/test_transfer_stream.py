"""Streams against fake channels: speeds, work stealing, lost streams, verification."""

from __future__ import annotations

import asyncio
import os

import pytest
from fake_channels import Memory

from reservoir.agent.initiator import WriteData
from reservoir.agent.scsi import receipt_digest
from reservoir.agent.transfer import Extent, Queues, ServerPair, make_plan, root_hash
from reservoir.agent.transfer._extent_write import ExtentWrite
from reservoir.agent.transfer._stream import (
    Dispatcher,
    PieceHasher,
    Settings,
    StreamStats,
    StreamWorker,
    VerifyError,
    digest,
    digests,
)

BLOCK = 512
EXTENT = 64 << 10


class Sink(Memory):
    """A view of one shared destination with this stream's own speed."""

    def __init__(self, shared: Memory, delay: float) -> None:
        super().__init__(shared.data, delay)


async def run(
    delays: list[float],
    extents: int,
    *,
    settings: Settings | None = None,
    sinks: list[Memory] | None = None,
    lost_source: int | None = None,
    seen: list[Dispatcher] | None = None,
) -> tuple[bytes, bytearray, list[StreamStats], list[float], dict[int, bytes]]:
    size = extents * EXTENT
    source = os.urandom(size)
    dest = bytearray(size)
    plan = make_plan(
        0, size, extent_size=EXTENT, block_size=BLOCK, pair=ServerPair("s", "d", len(delays))
    )
    dispatcher = Dispatcher(Queues(plan), len(delays))
    if seen is not None:
        seen.append(dispatcher)
    done: dict[int, bytes] = {}
    finish = [0.0] * len(delays)
    loop = asyncio.get_running_loop()

    def on_done(
        worker: StreamWorker, extent: Extent, extent_digest: bytes, _: bytes | None, __: bool
    ) -> None:
        assert extent.id not in done
        done[extent.id] = extent_digest
        dispatcher.done(worker.stats.index, extent)

    async def stream(i: int, worker: StreamWorker) -> None:
        await worker.run()
        finish[i] = loop.time()

    chosen = sinks or [Memory(dest, d) for d in delays]
    for sink in chosen:
        sink.data = dest
    sources = [Memory(bytearray(source)) for _ in delays]
    if lost_source is not None:
        sources[lost_source].fail_after = 0
    workers = [
        StreamWorker(
            StreamStats(i, "p"),
            sources[i],
            chosen[i],
            dispatcher,
            settings or Settings(piece=16 << 10, depth=4),
            on_done,
        )
        for i in range(len(delays))
    ]
    await asyncio.gather(*(stream(i, w) for i, w in enumerate(workers)))
    return source, dest, [w.stats for w in workers], finish, done


def test_copies_every_extent_once() -> None:
    source, dest, stats, _, done = asyncio.run(run([0.0] * 3, 20))
    assert dest == source
    assert sorted(done) == list(range(20))
    assert sum(s.extents for s in stats) == 20
    assert root_hash([done[i] for i in range(20)]) == root_hash(
        [digest(source[i * EXTENT : (i + 1) * EXTENT]) for i in range(20)]
    )


def test_slow_and_fast_streams_finish_within_one_extent() -> None:
    delays = [0.0005, 0.001, 0.002, 0.004]
    source, dest, stats, finish, _ = asyncio.run(run(delays, 60))
    assert dest == source
    per_extent = 2 * (EXTENT // (16 << 10)) / 4 * max(delays)  # write + read back, 4 in flight
    assert max(finish) - min(finish) <= 3 * per_extent + 0.05  # read ahead holds <= 3 extents
    assert stats[0].extents > stats[3].extents


def test_lost_stream_extents_are_carried_by_the_others() -> None:
    shared = Memory(bytearray())
    sinks: list[Memory] = [Sink(shared, 0.0005) for _ in range(3)]
    sinks[1].fail_after = 6
    source, dest, stats, _, done = asyncio.run(run([0.0] * 3, 24, sinks=sinks))
    assert dest == source and sorted(done) == list(range(24))
    assert not stats[1].up and "dropped" in str(stats[1].error)
    assert stats[0].up and stats[2].up


def test_every_stream_lost_leaves_extents_undone() -> None:
    sinks: list[Memory] = [Memory(bytearray()) for _ in range(2)]
    for sink in sinks:
        sink.fail_after = 0
    _, _, stats, _, done = asyncio.run(run([0.0] * 2, 8, sinks=sinks))
    assert not done and not any(s.up for s in stats)


def test_mismatch_is_resent_and_counted() -> None:
    sink = Memory(bytearray())
    sink.corrupt = 2
    settings = Settings(piece=EXTENT)
    source, dest, stats, _, _ = asyncio.run(run([0.0], 4, sinks=[sink], settings=settings))
    assert dest == source
    assert stats[0].retries == 2 and stats[0].bytes == 6 * EXTENT


def test_mismatch_gives_up_after_retries() -> None:
    sink = Memory(bytearray())
    sink.corrupt = 100
    with pytest.raises(VerifyError, match="extent 0"):
        asyncio.run(run([0.0], 2, sinks=[sink], settings=Settings(piece=EXTENT, retries=2)))


def test_no_verify_does_not_read_back() -> None:
    sink = Memory(bytearray())
    sink.corrupt = 1
    source, dest, stats, _, _ = asyncio.run(
        run([0.0], 2, sinks=[sink], settings=Settings(verify=False))
    )
    assert dest != source and stats[0].retries == 0


def test_lost_while_reading_back_is_carried_too() -> None:
    sinks: list[Memory] = [Memory(bytearray(), 0.0005) for _ in range(2)]
    sinks[0].fail_after = 5  # its read-back after the fifth write fails
    source, dest, stats, _, done = asyncio.run(
        run([0.0] * 2, 12, sinks=sinks, settings=Settings(piece=EXTENT))
    )
    assert dest == source and sorted(done) == list(range(12))
    assert not stats[0].up and stats[1].up


def test_lost_source_session_is_carried_too() -> None:
    source, dest, stats, _, done = asyncio.run(run([0.0005] * 3, 12, lost_source=1))
    assert dest == source and sorted(done) == list(range(12))
    assert not stats[1].up and stats[1].extents == 0


def test_destination_that_hashes_is_not_read_back() -> None:
    sink = Memory(bytearray())
    sink.hashes = True
    source, dest, stats, _, _ = asyncio.run(run([0.0], 6, sinks=[sink]))
    assert dest == source and stats[0].extents == 6
    assert sink.digests == 6 and sink.reads == 0


def test_destination_digest_mismatch_is_resent() -> None:
    sink = Memory(bytearray())
    sink.hashes, sink.corrupt = True, 1
    source, dest, stats, _, _ = asyncio.run(
        run([0.0], 3, sinks=[sink], settings=Settings(piece=EXTENT))
    )
    assert dest == source and stats[0].retries == 1 and sink.reads == 0


class SlowCheck(Memory):
    """A destination that hashes its storage slowly (a read of its disk), writes fast."""

    def __init__(self) -> None:
        super().__init__(bytearray())
        self.hashes = True
        self.checking = self.most_checking = 0

    async def digest(self, offset: int, length: int) -> bytes | None:
        self.checking += 1
        self.most_checking = max(self.most_checking, self.checking)
        try:
            await asyncio.sleep(0.02)
            return await super().digest(offset, length)
        finally:
            self.checking -= 1


def test_a_stream_writes_its_next_extents_while_the_destination_answers_a_check() -> None:
    """A written extent frees its place while its check is answered: the stream goes
    on writing, with at most ``checks_in_flight`` checks waiting."""
    sink = SlowCheck()
    settings = Settings(piece=EXTENT, extents_in_flight=1, checks_in_flight=3)
    source, dest, stats, _, done = asyncio.run(run([0.0], 10, sinks=[sink], settings=settings))
    assert dest == source and sorted(done) == list(range(10)) and stats[0].extents == 10
    assert sink.most_checking == 3


def test_window_stays_full_across_extent_boundaries() -> None:
    sink = Memory(bytearray(), 0.002)
    sink.hashes = True
    settings = Settings(piece=EXTENT // 2, depth=4)  # two commands an extent, four in flight
    source, dest, _, _, _ = asyncio.run(run([0.0], 8, sinks=[sink], settings=settings))
    assert dest == source and sink.most_in_flight == 4


def test_extents_of_a_lost_stream_stay_in_flight_until_done_elsewhere() -> None:
    async def main() -> tuple[set[int], set[int], bytes, bytearray]:
        size = 4 * EXTENT
        source = os.urandom(size)
        dest = bytearray(size)
        plan = make_plan(
            0, size, extent_size=EXTENT, block_size=BLOCK, pair=ServerPair("s", "d", 2)
        )
        dispatcher = Dispatcher(Queues(plan), 2)

        def on_done(
            worker: StreamWorker, extent: Extent, _: bytes, __: bytes | None, ___: bool
        ) -> None:
            dispatcher.done(worker.stats.index, extent)

        def worker(index: int, sink: Memory) -> StreamWorker:
            settings = Settings(piece=EXTENT // 2, depth=1)
            src = Memory(bytearray(source))
            return StreamWorker(StreamStats(index, "p"), src, sink, dispatcher, settings, on_done)

        dying = Memory(dest)
        dying.fail_after = 1  # the second half of its first extent is lost
        await worker(0, dying).run()
        after_loss = dispatcher.in_flight()
        await worker(1, Memory(dest)).run()
        return after_loss, dispatcher.in_flight(), source, dest

    after_loss, at_end, source, dest = asyncio.run(main())
    assert 0 in after_loss  # half written: resending it sends bytes twice
    assert at_end == set() and dest == source


def test_a_slow_stream_leaves_the_last_extents_to_a_fast_one() -> None:
    """Earliest completion first: at the tail, the slow stream (15x slower here) stops
    taking extents it would finish after the fast one has done everything."""
    seen: list[Dispatcher] = []
    source, dest, stats, _, done = asyncio.run(run([0.002, 0.03], 60, seen=seen))
    assert dest == source and sorted(done) == list(range(60))
    fast, slow = stats[0].extents, stats[1].extents
    assert fast + slow == 60 and fast > slow
    assert seen[0].deferred > 0  # the slow stream left extents to the fast one


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_dispatcher_defers_a_slow_stream_only_near_the_end() -> None:
    """Stream 1 completes at a tenth of stream 0's rate: with 40 extents left it takes
    (it finishes one long before the pair ends), with 2 left it waits."""
    plan = make_plan(
        0, 50 * EXTENT, extent_size=EXTENT, block_size=BLOCK, pair=ServerPair("s", "d", 2)
    )
    clock = Clock()
    dispatcher = Dispatcher(Queues(plan), 2, clock=clock)

    async def main() -> list[bool]:
        a = await dispatcher.take(0)
        b = await dispatcher.take(1)
        assert isinstance(a, Extent) and isinstance(b, Extent)
        clock.now = 1.0
        dispatcher.done(0, a)  # stream 0: one extent a second
        for _ in range(9):
            extent = await dispatcher.take(0)
            assert isinstance(extent, Extent)
            dispatcher.done(0, extent)
        clock.now = 10.0
        dispatcher.done(1, b)  # stream 1: one extent in ten seconds
        early = dispatcher._worth(1)
        while dispatcher.queues.queued(0) > 2:
            extent = await dispatcher.take(0)
            assert isinstance(extent, Extent)
            dispatcher.done(0, extent)
        return [early, dispatcher._worth(1), dispatcher._worth(0)]

    assert asyncio.run(main()) == [True, False, True]
    assert dispatcher.deferred == 1


def test_an_idle_stream_writes_the_pending_pieces_of_a_slow_streams_extent() -> None:
    """Two extents of eight pieces, two pieces in flight a stream: the fast stream
    finishes its own and then writes pieces of the slow stream's, over its own sink."""
    fast, slow = Memory(bytearray(), 0.001), Memory(bytearray(), 0.05)
    settings = Settings(piece=EXTENT // 8, depth=2)
    source, dest, stats, _, done = asyncio.run(
        run([0.001, 0.05], 2, sinks=[fast, slow], settings=settings)
    )
    assert dest == source and sorted(done) == [0, 1]
    assert stats[0].helped > 0 and stats[1].helped == 0
    assert slow.writes + stats[0].helped == 8
    assert fast.writes == 8 * stats[0].extents + stats[0].helped


def test_a_stream_whose_pieces_are_all_issued_helps_before_its_own_extent_is_done() -> None:
    """At the tail, a stream still holding an extent whose pieces are all on its
    connection (completing, or the check under way) writes another stream's pending
    pieces; while its extent is still read and hashed, or has pieces of its own to
    issue, it does not."""
    plan = make_plan(
        0, 2 * EXTENT, extent_size=EXTENT, block_size=BLOCK, pair=ServerPair("s", "d", 2)
    )
    dispatcher = Dispatcher(Queues(plan), 2)

    async def waits(asking: asyncio.Future[Extent | ExtentWrite | None]) -> bool:
        dispatcher.nudge()
        await asyncio.sleep(0.3)  # longer than the dispatcher's recheck
        return not asking.done()

    async def main() -> tuple[list[bool], object, ExtentWrite]:
        a, b = await dispatcher.take(0), await dispatcher.take(1)
        assert isinstance(a, Extent) and isinstance(b, Extent)
        mine = ExtentWrite(a, 0, memoryview(bytearray(EXTENT)), EXTENT // 4)
        theirs = ExtentWrite(b, 1, memoryview(bytearray(EXTENT)), EXTENT // 4)
        dispatcher.writing(b)
        dispatcher.begin_write(theirs)
        theirs.take_piece()
        asking = asyncio.ensure_future(dispatcher.take(0))
        waited = [await waits(asking)]  # stream 0's extent is still being hashed
        dispatcher.writing(a)
        dispatcher.begin_write(mine)
        mine.take_piece()
        waited.append(await waits(asking))  # it has pieces of its own to issue
        while mine.take_piece() is not None:
            pass
        dispatcher.nudge()
        return waited, await asyncio.wait_for(asking, 5), theirs

    waited, given, theirs = asyncio.run(main())
    assert waited == [True, True] and given is theirs


def test_a_helper_that_loses_its_connection_gives_its_piece_back() -> None:
    """The fast stream's connection drops on its first helping write: that piece goes
    back and the slow stream writes it; both extents are done, the data equal."""
    fast, slow = Memory(bytearray(), 0.001), Memory(bytearray(), 0.05)
    fast.fail_after = 8  # its own extent's eight pieces, then nothing more
    fast.hashes = slow.hashes = True  # verified without reading back
    settings = Settings(piece=EXTENT // 8, depth=2)
    source, dest, stats, _, done = asyncio.run(
        run([0.001, 0.05], 2, sinks=[fast, slow], settings=settings)
    )
    assert stats[0].error is not None and stats[0].helped == 0
    assert stats[0].extents == 1 and stats[1].extents == 1
    assert dest == source and sorted(done) == [0, 1]


def test_a_stream_issues_no_more_pieces_than_its_window_allows() -> None:
    sink = Memory(bytearray(), 0.002)
    settings = Settings(piece=EXTENT // 8, depth=3)
    source, dest, _, _, _ = asyncio.run(run([0.0], 4, sinks=[sink], settings=settings))
    assert dest == source and sink.most_in_flight == 3


RECEIPTS = Settings(piece=EXTENT // 4, depth=4, receipts=True)


def test_receipt_mode_verifies_by_receipts_without_reading_storage() -> None:
    sink = Memory(bytearray())
    sink.keeps_receipts = True
    source, dest, stats, _, done = asyncio.run(run([0.0], 6, sinks=[sink], settings=RECEIPTS))
    assert dest == source and len(done) == 6
    assert stats[0].by_receipt == 6 and sink.reads == 0 and sink.digests == 0


def test_receipt_mode_checks_storage_where_the_destination_has_no_receipts() -> None:
    sink = Memory(bytearray())
    sink.hashes = True  # hashes storage, keeps no receipts
    source, dest, stats, _, _ = asyncio.run(run([0.0], 6, sinks=[sink], settings=RECEIPTS))
    assert dest == source and stats[0].by_receipt == 0 and sink.digests == 6


def test_a_receipt_of_other_data_is_a_mismatch_and_the_extent_is_resent() -> None:
    sink = Memory(bytearray())
    sink.keeps_receipts = True
    real_write = sink.write

    async def garbled_once(offset: int, data: WriteData) -> None:
        await real_write(offset, data)
        if sink.writes == 1:  # the receipt says it received something else
            sink.received[offset] = (len(data), digest(b"other"))

    sink.write = garbled_once  # type: ignore[method-assign]
    source, dest, stats, _, done = asyncio.run(run([0.0], 2, sinks=[sink], settings=RECEIPTS))
    assert dest == source and len(done) == 2
    assert stats[0].retries == 1 and stats[0].by_receipt == 2


def test_the_one_pass_digests_are_the_extent_digest_and_the_receipt_digest() -> None:
    data = bytearray(os.urandom(5 * EXTENT // 2))
    whole, receipt = digests(data, EXTENT // 4, receipt=True)
    assert whole == digest(data) and receipt == receipt_digest(data, EXTENT // 4)
    assert digests(data, EXTENT // 4, receipt=False) == (digest(data), None)


@pytest.mark.parametrize("chunk", [1, 4096, EXTENT // 4, EXTENT // 3 + 5, 3 * EXTENT])
@pytest.mark.parametrize("receipt", [True, False])
def test_piece_hasher_fed_in_chunks_of_any_size_says_what_digests_says(
    chunk: int, receipt: bool
) -> None:
    data = bytearray(os.urandom(5 * EXTENT // 2 + 512))
    hasher = PieceHasher(EXTENT // 4, receipt)
    view = memoryview(data)
    for at in range(0, len(view), chunk if chunk > 1 else 997):
        hasher.update(view[at : at + (chunk if chunk > 1 else 997)])
    assert hasher.digests() == digests(data, EXTENT // 4, receipt)


def test_a_helper_stops_when_the_owner_of_the_extent_fails() -> None:
    """The owner's connection drops while a helper writes its pieces: the helper stops
    taking them (the extent goes back to the queue) and the copy still completes."""
    helper, owner = Memory(bytearray(), 0.001), Memory(bytearray(), 0.02)
    owner.fail_after = 1  # its first piece, then the connection is gone
    helper.hashes = owner.hashes = True
    settings = Settings(piece=EXTENT // 8, depth=2)
    source, dest, stats, _, done = asyncio.run(
        asyncio.wait_for(run([0.001, 0.02], 2, sinks=[helper, owner], settings=settings), 10)
    )
    assert stats[1].error is not None and stats[0].error is None
    assert dest == source and sorted(done) == [0, 1]


def test_an_extent_a_stopped_run_had_in_flight_is_not_sent_again_where_it_is_there() -> None:
    """Extents in flight at the last stop: the one the destination holds as the source
    has it (its digest) is done without a write; the one it does not is written."""

    async def main() -> tuple[bytes, bytearray, Memory, dict[int, bool], StreamStats]:
        size = 3 * EXTENT
        source = os.urandom(size)
        dest = bytearray(size)
        dest[:EXTENT] = source[:EXTENT]  # extent 0 arrived whole before the stop
        dest[EXTENT : EXTENT + 100] = source[EXTENT : EXTENT + 100]  # extent 1 in part
        plan = make_plan(
            0, size, extent_size=EXTENT, block_size=BLOCK, pair=ServerPair("s", "d", 1)
        )
        dispatcher = Dispatcher(Queues(plan), 1)
        wrote: dict[int, bool] = {}

        def on_done(
            worker: StreamWorker, extent: Extent, _: bytes, __: bytes | None, by_write: bool
        ) -> None:
            wrote[extent.id] = by_write
            dispatcher.done(worker.stats.index, extent)

        sink = Memory(dest)
        sink.hashes = True
        stats = StreamStats(0, "p")
        settings = Settings(piece=EXTENT)
        src = Memory(bytearray(source))
        worker = StreamWorker(
            stats, src, sink, dispatcher, settings, on_done, maybe_written=frozenset({0, 1})
        )
        await worker.run()
        return source, dest, sink, wrote, stats

    source, dest, sink, wrote, stats = asyncio.run(main())
    assert dest == source
    assert wrote == {0: False, 1: True, 2: True}
    assert sink.writes == 2 and stats.found == 1 and stats.bytes == 2 * EXTENT
