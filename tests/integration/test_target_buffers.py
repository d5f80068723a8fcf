"""The target's write data buffers come back to its pool on every path a write can
take (done, refused, failed in its data phase, aborted, cut off with its connection),
and the pool keeps no more than the sessions may have in flight. Buffers of 64 KiB
to 1 MiB are chunks of the io_uring engine's registered arena where it has one: they
go back to the arena, not among the buffers kept."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reservoir.agent.buffers import ARENA_MIN, BufferPool
from reservoir.agent.iscsi import pdu as P
from reservoir.agent.target.server import ARENA_CHUNK, KEPT_BUFFERS_MAX

from .conftest import IQN
from .inprocess import InProcessTarget, one_lun_config, serving
from .rawclient import RawClient, encode_lun, write16

pytestmark = pytest.mark.integration

MIB = 1 << 20


@pytest.fixture
def served(lun_file: Path) -> Iterator[InProcessTarget]:
    with serving(one_lun_config(IQN, lun_file)) as target:
        yield target


@pytest.fixture
def client(served: InProcessTarget) -> Iterator[RawClient]:
    with RawClient(served.host, served.port) as c:
        c.login(IQN)
        c.clear_unit_attention()
        yield c


def _pool_state(target: InProcessTarget) -> tuple[int, int]:
    """(bytes lent, from the arena too; bytes kept) of the target's write buffer pool."""
    pool: BufferPool = target.server.buffers
    return target.call(lambda: (pool.lent + pool.arena_lent, pool.held))


def _kept(target: InProcessTarget, *sizes: int) -> int:
    """What the pool keeps once buffers of ``sizes`` came back: those the arena, if
    any, did not lend (one chunk each, fewer than it has)."""
    arena = target.call(lambda: target.server.buffers.arena_bytes)
    return sum(s for s in sizes if not (arena and ARENA_MIN <= s <= ARENA_CHUNK))


def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait for the target's loop to get there (the end of a task follows its answer)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def _all_back(target: InProcessTarget, *sizes: int) -> None:
    kept = _kept(target, *sizes)
    _until(lambda: _pool_state(target) == (0, kept))


def _write(c: RawClient, blocks: int, immediate: int, *, final: bool = True) -> P.ScsiCommand:
    """A WRITE(16) of ``blocks`` at LBA 0 with ``immediate`` bytes in the command."""
    cmd = P.ScsiCommand(
        itt=c.next_itt(),
        cmdsn=c.cmdsn,
        expstatsn=c.expstatsn,
        write=True,
        final=final,
        expected_length=blocks * 512,
        cdb=write16(0, blocks),
        lun=encode_lun(0),
        data=bytes(immediate),
    )
    c.cmdsn += 1
    c.send(cmd)
    return cmd


def test_a_written_buffer_comes_back_and_the_next_write_reuses_it(
    served: InProcessTarget, client: RawClient
) -> None:
    assert client.scsi(write16(0, 512), data=bytes(256 << 10), immediate=256 << 10).status == 0
    _all_back(served, 256 << 10)
    misses = served.call(lambda: served.server.buffers.misses)
    assert client.scsi(write16(0, 512), data=bytes(256 << 10), immediate=256 << 10).status == 0
    _all_back(served, 256 << 10)
    assert served.call(lambda: served.server.buffers.misses) == misses


def test_a_write_with_part_of_its_data_immediate_gives_back_both_buffers(
    served: InProcessTarget, client: RawClient
) -> None:
    """The immediate data's own buffer is copied into the task's and goes back at once
    (the rest arrives in one Data-Out, of 960 KiB)."""
    assert client.scsi(write16(0, 2048), data=bytes(MIB), immediate=64 << 10).status == 0
    _all_back(served, MIB, 64 << 10, 960 << 10)


def test_a_refused_write_command_gives_its_immediate_data_back(
    served: InProcessTarget, client: RawClient
) -> None:
    """More immediate data than the Expected Data Transfer Length: Reject.  (Data
    segments under 64 KiB that arrive whole are copied out of the receive buffer: the
    ones here are larger, as a copy's are.)"""
    cmd = P.ScsiCommand(
        itt=client.next_itt(),
        cmdsn=client.cmdsn,
        expstatsn=client.expstatsn,
        write=True,
        expected_length=64 << 10,
        cdb=write16(0, 128),
        lun=encode_lun(0),
        data=bytes(128 << 10),
    )
    client.send(cmd)
    assert isinstance(client.recv(), P.Reject)
    _all_back(served, 128 << 10)


def test_a_write_failing_in_its_data_phase_gives_its_buffers_back(
    served: InProcessTarget, client: RawClient
) -> None:
    """Data-Out at an offset the R2T did not ask for: Reject, ABORTED COMMAND."""
    cmd = _write(client, 2048, 256 << 10)
    r2t = client.recv()
    assert isinstance(r2t, P.R2T)
    bad = P.DataOut(itt=cmd.itt, ttt=r2t.ttt, offset=r2t.offset + 4096, data=bytes(128 << 10))
    bad.final = True
    client.send(bad)
    answers = [client.recv(), client.recv()]
    assert {type(a) for a in answers} == {P.Reject, P.ScsiResponse}
    _all_back(served, MIB, 256 << 10, 128 << 10)


def test_a_write_out_of_range_gives_its_buffer_back(
    served: InProcessTarget, client: RawClient
) -> None:
    answer = client.scsi(write16(1 << 30, 256), data=bytes(128 << 10), immediate=128 << 10)
    assert answer.status == 2  # CHECK CONDITION: LBA out of range
    _all_back(served, 128 << 10)


def test_an_aborted_write_gives_its_buffer_back(served: InProcessTarget, client: RawClient) -> None:
    cmd = _write(client, 2048, 256 << 10)
    assert isinstance(client.recv(), P.R2T)
    tmf = P.TaskMgmtRequest(
        itt=client.next_itt(),
        function=P.TmfFunction.ABORT_TASK,
        ref_task_tag=cmd.itt,
        ref_cmdsn=cmd.cmdsn,
        cmdsn=client.cmdsn,
        immediate=True,
        lun=encode_lun(0),
    )
    client.send(tmf)
    while not isinstance(client.recv(), P.TaskMgmtResponse):
        pass
    _all_back(served, MIB, 256 << 10)


def test_a_connection_lost_mid_write_gives_every_buffer_back(
    served: InProcessTarget, client: RawClient
) -> None:
    """A write waiting for its R2T'd data, and a Data-Out cut off half way.  (A
    second session keeps the pool's bound up: the last one ending lets all go.)"""
    with RawClient(served.host, served.port) as keeper:
        keeper.login(IQN)
        cmd = _write(client, 2048, 256 << 10)
        r2t = client.recv()
        assert isinstance(r2t, P.R2T)
        cut = P.DataOut(itt=cmd.itt, ttt=r2t.ttt, offset=r2t.offset, data=bytes(r2t.length))
        cut.final = True
        client.send_raw(P.encode_bytes(cut)[: 128 << 10])
        lent = MIB + r2t.length  # the task's buffer, the Data-Out's
        _until(lambda: _pool_state(served)[0] == lent)
        client.close()
        _all_back(served, MIB, r2t.length, 256 << 10)  # and the immediate data's


def test_the_pool_keeps_what_the_sessions_may_have_in_flight(served: InProcessTarget) -> None:
    """Each session's CmdSN window of commands of MaxBurstLength; none once it ends."""
    server = served.server
    assert served.call(lambda: server.buffers.limit) == 0
    with RawClient(served.host, served.port) as c:
        c.login(IQN)
        burst = int(c.params["MaxBurstLength"])
        wanted = min(server.queue_depth * burst, KEPT_BUFFERS_MAX)
        _until(lambda: served.call(lambda: server.buffers.limit) == wanted)
        c.clear_unit_attention()
        assert c.scsi(write16(0, 512), data=bytes(256 << 10), immediate=256 << 10).status == 0
        c.logout()
    _until(lambda: served.call(lambda: (server.buffers.limit, server.buffers.held)) == (0, 0))
