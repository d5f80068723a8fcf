"""BufferPool: page-aligned buffers, given back once, kept up to a bound that moves."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

from reservoir.agent.buffers import ARENA_MIN, BufferPool, aligned_buffer
from reservoir.agent.target.server import ARENA_CHUNK, KEPT_BUFFERS_MAX, TargetServer


def _address(buf: memoryview) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


def test_buffers_are_page_aligned_for_o_direct() -> None:
    pool = BufferPool()
    assert all(_address(pool.take(size)) % 4096 == 0 for size in (512, 4096, 1 << 20))


def test_a_buffer_given_back_twice_is_kept_once() -> None:
    pool = BufferPool()
    buf = pool.take(1 << 20)
    pool.give(buf)
    pool.give(buf)
    assert pool.held == 1 << 20
    assert pool.take(1 << 20) is buf and pool.take(1 << 20) is not buf


def test_buffers_the_pool_did_not_lend_are_not_kept() -> None:
    pool = BufferPool()
    pool.give(bytearray(1 << 20))
    pool.give(aligned_buffer(1 << 20))
    pool.give(b"x" * 4096)
    assert pool.held == 0


def test_a_part_of_a_buffer_is_not_kept() -> None:
    pool = BufferPool()
    buf = pool.take(1 << 20)
    pool.give(buf[:4096])
    assert pool.held == 0 and pool.lent == 1 << 20


def test_lent_counts_the_buffers_out_until_they_come_back() -> None:
    pool = BufferPool()
    bufs = [pool.take(1 << 20) for _ in range(3)]
    assert pool.lent == 3 << 20 and pool.misses == 3
    for buf in bufs:
        pool.give(buf)
    assert pool.lent == 0 and pool.held == 3 << 20


def test_a_lower_bound_lets_kept_buffers_go() -> None:
    pool = BufferPool(limit=4 << 20)
    for buf in [pool.take(1 << 20) for _ in range(4)]:
        pool.give(buf)
    pool.set_limit(1 << 20)
    assert pool.held == 1 << 20
    pool.give(pool.take(1 << 20))
    assert pool.held == 1 << 20


def test_the_target_keeps_at_most_kept_buffers_max_for_reuse() -> None:
    """Many sessions with large bursts: the bound stops at KEPT_BUFFERS_MAX."""
    burst = 16 << 20
    sessions = {
        i: SimpleNamespace(
            is_discovery=False, queue_depth=128, params=SimpleNamespace(max_burst_length=burst)
        )
        for i in range(4)
    }
    fake = SimpleNamespace(sessions=sessions, buffers=BufferPool(), queue_depth=128)
    TargetServer._bound_buffers(fake)  # type: ignore[arg-type]
    assert fake.buffers.limit == KEPT_BUFFERS_MAX


def _arena_pool(chunks: int = 2) -> tuple[BufferPool, memoryview]:
    arena = aligned_buffer(chunks * ARENA_CHUNK)
    pool = BufferPool()
    pool.use_arena(arena, ARENA_CHUNK)
    return pool, arena


def test_buffers_of_a_data_segment_are_chunks_of_the_arena_until_it_runs_out() -> None:
    pool, arena = _arena_pool(2)
    base = _address(arena)
    first, second = pool.take(ARENA_CHUNK), pool.take(256 << 10)
    assert {_address(first) - base, _address(second) - base} == {0, ARENA_CHUNK}
    assert pool.arena_lent == ARENA_CHUNK + (256 << 10)
    third = pool.take(ARENA_CHUNK)  # every chunk out: a plain buffer
    assert third.obj is not arena.obj and pool.misses == 1
    small = pool.take(ARENA_MIN - 512)  # too small to be worth a chunk
    assert small.obj is not arena.obj


def test_a_chunk_comes_back_by_its_address_once_and_whole() -> None:
    pool, arena = _arena_pool(1)
    chunk = pool.take(ARENA_CHUNK)
    pool.give(chunk[: ARENA_CHUNK // 2])  # a part: kept out
    assert pool.arena_lent == ARENA_CHUNK
    pool.give(memoryview(chunk))  # a view of it, as a task holds it: back
    pool.give(chunk)  # twice: nothing more
    assert pool.arena_lent == 0
    again = pool.take(ARENA_CHUNK)
    assert _address(again) == _address(arena) and pool.misses == 0
