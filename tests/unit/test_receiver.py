"""The target's receive framing: PDUs read into a stage, write data into its own buffer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reservoir.agent.buffers import BufferPool
from reservoir.agent.iscsi import pdu as P
from reservoir.agent.iscsi.receiver import DIRECT_MIN, STAGE, Frame, Receiver


def _deliver(rx: Receiver, wire: bytes, chunk: int) -> list[Frame]:
    """Feed ``wire`` at most ``chunk`` bytes a read and collect every frame."""
    frames: list[Frame] = []
    for at in range(0, len(wire), chunk):
        frames += rx.feed(wire[at : at + chunk])
    return frames


def _data_out(itt: int, size: int, fill: int) -> P.DataOut:
    return P.DataOut(itt=itt, ttt=7, offset=0, final=True, data=bytes([fill]) * size)


@pytest.mark.parametrize("hd,dd", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("chunk", [1, 7, 1500, 65536, 1 << 20])
def test_a_mix_of_small_and_large_pdus_arrives_whole_and_in_order(
    hd: bool, dd: bool, chunk: int
) -> None:
    sizes = [0, 5, DIRECT_MIN - 1, DIRECT_MIN, 256 << 10, 3, (256 << 10) + 2, STAGE + 1]
    if chunk == 1:
        sizes = [0, 5, DIRECT_MIN + 3]  # byte by byte: keep it short
    pdus = [_data_out(i + 1, size, i + 1) for i, size in enumerate(sizes)]
    wire = b"".join(P.encode_bytes(p, header_digest=hd, data_digest=dd) for p in pdus)
    rx = Receiver(header_digest=hd, data_digest=dd)
    frames = _deliver(rx, wire, chunk)
    assert [P.decode(*f) for f in frames] == pdus
    assert rx.missing() == 0 and rx.pending() == 0


def test_large_write_data_is_read_into_the_buffer_the_pdu_keeps() -> None:
    """The kernel's read for the rest of a large Data-Out goes into the very object
    handed on as its data: no copy in Python."""
    wire = P.encode_bytes(_data_out(1, 256 << 10, 0xAB))
    rx = Receiver()
    first = rx.get_buffer()
    first[:4096] = wire[:4096]
    del first
    rx.received(4096)
    assert rx.next() is None
    rest = rx.get_buffer()
    assert len(rest) == len(wire) - 4096
    body = rest.obj
    rest[:] = wire[4096:]
    rx.received(len(wire) - 4096)
    frame = rx.next()
    assert frame is not None
    assert isinstance(frame[2], memoryview) and frame[2].obj is body
    assert bytes(frame[2]) == b"\xab" * (256 << 10)


def test_a_large_pdu_that_is_not_write_data_is_handed_on_as_bytes() -> None:
    text = P.TextRequest(itt=9, ttt=P.RESERVED_TAG, final=True, data=b"k=" + b"v" * 100_000)
    frames = _deliver(Receiver(), P.encode_bytes(text), 1 << 20)
    assert len(frames) == 1 and type(frames[0][2]) is bytes
    assert P.decode(*frames[0]) == text


def test_the_receiver_says_how_much_of_a_pdu_under_way_is_missing() -> None:
    """What the target waits for in one wakeup (SO_RCVLOWAT)."""
    wire = P.encode_bytes(_data_out(1, 100_000, 1))
    rx = Receiver()
    assert rx.missing() == 0
    _deliver(rx, wire[:20], 20)
    assert rx.missing() == 0  # no whole header yet
    _deliver(rx, wire[20:100], 80)
    assert rx.missing() == len(wire) - 100
    assert rx.pending() == 100
    _deliver(rx, wire[100:], 1 << 20)
    assert rx.missing() == 0


def test_bad_header_digest_is_fatal_for_a_large_pdu_too() -> None:
    wire = bytearray(P.encode_bytes(_data_out(1, 64 << 10, 1), header_digest=True))
    wire[49] ^= 1
    rx = Receiver(header_digest=True)
    with pytest.raises(P.PduError) as err:
        _deliver(rx, bytes(wire[:1000]), 1000)
    assert err.value.fatal


@pytest.mark.parametrize("size", [4, 64 << 10])
def test_bad_data_digest_is_data_digest_error_and_the_next_pdu_still_arrives(
    size: int,
) -> None:
    first = bytearray(P.encode_bytes(_data_out(1, size, 1), data_digest=True))
    first[-1] ^= 0xFF
    second = P.encode_bytes(P.NopOut(itt=4), data_digest=True)
    rx = Receiver(data_digest=True)
    with pytest.raises(P.PduError) as err:
        _deliver(rx, bytes(first), 1 << 20)
    assert err.value.reason == P.RejectReason.DATA_DIGEST_ERROR and not err.value.fatal
    frames = _deliver(rx, second, 1 << 20)
    assert len(frames) == 1 and P.decode(*frames[0]).itt == 4


def test_a_data_segment_over_the_limit_is_refused_before_it_is_read() -> None:
    header = bytearray(P.NopOut(itt=1).encode_header())
    header[5:8] = (1 << 20).to_bytes(3, "big")
    rx = Receiver(max_data=8192)
    with pytest.raises(P.PduError) as err:
        _deliver(rx, bytes(header), 48)
    assert err.value.fatal and err.value.header == bytes(header)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300_000), min_size=1, max_size=6),
    chunks=st.lists(st.integers(1, 200_000), min_size=1, max_size=8),
    hd=st.booleans(),
    dd=st.booleans(),
)
def test_any_chunking_gives_the_same_pdus(
    sizes: list[int], chunks: list[int], hd: bool, dd: bool
) -> None:
    pdus = [_data_out(i + 1, size, i % 251) for i, size in enumerate(sizes)]
    wire = b"".join(P.encode_bytes(p, header_digest=hd, data_digest=dd) for p in pdus)
    rx = Receiver(header_digest=hd, data_digest=dd)
    frames: list[tuple[bytes, bytes, object]] = []
    view, i = memoryview(wire), 0
    while view:
        part = view[: chunks[i % len(chunks)]]
        frames += _deliver(rx, bytes(part), len(part))
        view, i = view[len(part) :], i + 1
    assert [P.decode(*f) for f in frames] == pdus  # type: ignore[arg-type]


def test_a_write_buffer_given_back_is_the_one_the_next_large_write_arrives_in() -> None:
    pool = BufferPool()
    rx = Receiver(pool=pool)
    (first,) = _deliver(rx, P.encode_bytes(_data_out(1, 1 << 20, 1)), 1 << 20)
    assert isinstance(first[2], memoryview)
    pool.give(first[2])
    assert pool.held == 1 << 20
    (second,) = _deliver(rx, P.encode_bytes(_data_out(2, 1 << 20, 2)), 1 << 20)
    assert second[2] is first[2] and pool.held == 0
    assert bytes(second[2]) == b"\x02" * (1 << 20)  # all of it rewritten


def test_the_pool_keeps_no_more_than_its_limit() -> None:
    pool = BufferPool(limit=3 << 20)
    for buf in [pool.take(1 << 20) for _ in range(5)]:
        pool.give(buf)
    assert pool.held == 3 << 20
    kept = {id(pool.take(1 << 20)) for _ in range(3)}
    assert len(kept) == 3 and pool.held == 0
    assert len(pool.take(1 << 20)) == 1 << 20  # a fresh one when none is kept


def test_a_padded_write_segment_is_copied_out_and_its_buffer_kept_for_reuse() -> None:
    pool = BufferPool()
    rx = Receiver(pool=pool)
    (frame,) = _deliver(rx, P.encode_bytes(_data_out(1, (64 << 10) + 1, 7)), 1 << 20)
    assert type(frame[2]) is bytes and len(frame[2]) == (64 << 10) + 1
    assert pool.held == (64 << 10) + 4


def test_the_write_segment_under_way_goes_back_to_the_pool_when_released() -> None:
    """The connection is gone half way through a large Data-Out."""
    pool = BufferPool()
    rx = Receiver(pool=pool)
    wire = P.encode_bytes(_data_out(1, 1 << 20, 3))
    assert rx.feed(wire[:100_000]) == []
    assert pool.lent == 1 << 20
    rx.release()
    assert pool.lent == 0 and pool.held == 1 << 20
