"""A stream's window: sized from the connection's congestion window (TCP_INFO)."""

from __future__ import annotations

import asyncio
import struct

import pytest

from reservoir.agent.transfer._window import Window, pieces_for

MIB = 1 << 20


def tcp_info(cwnd_segments: int, mss: int, pacing: int = 0, rtt_us: int = 0) -> bytes:
    """A struct tcp_info with only snd_mss (offset 16), snd_cwnd (80) and, where given,
    rtt (68) and pacing_rate (104) set."""
    raw = bytearray(248)
    struct.pack_into("=I", raw, 16, mss)
    struct.pack_into("=I", raw, 80, cwnd_segments)
    struct.pack_into("=I", raw, 68, rtt_us)
    struct.pack_into("=Q", raw, 104, pacing)
    return bytes(raw)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("cwnd", "expected"),
    [(0, 2), (100_000, 2), (2_000_000, 5), (3 * MIB, 7), (100 * MIB, 8)],
)
def test_pieces_for_keeps_two_congestion_windows_and_a_piece(cwnd: int, expected: int) -> None:
    assert pieces_for(cwnd, MIB, least=2, most=8) == expected


@pytest.mark.parametrize(
    ("pacing", "expected"),
    [
        (7_300_000, 3),  # capped to 58 Mbit/s at 100 ms: 0.73 MB a round trip
        (100_000_000, 4),  # paced above what the window carries: the window
        ((1 << 64) - 1, 4),  # not paced
        (0, 4),  # not known
    ],
)
def test_a_paced_connection_issues_what_its_rate_carries_in_a_round_trip(
    pacing: int, expected: int
) -> None:
    """Its window is 1000 segments (1.45 MB, 4 pieces issued), but a stream whose rate
    is capped sends less: what it issues beyond that waits in its socket, and at the
    end of a copy it drains that alone while the other streams have nothing left."""
    window = Window(8, MIB, lambda: tcp_info(1000, 1448, pacing, rtt_us=100_000))
    assert window.limit == expected


def test_a_window_follows_the_congestion_window_read_at_most_every_refresh() -> None:
    infos = [tcp_info(1000, 1448), tcp_info(5000, 1448)]  # 1.4 MB, then 7.2 MB
    reads: list[int] = []

    def source() -> bytes:
        reads.append(1)
        return infos[min(len(reads), 2) - 1]

    clock = Clock()
    window = Window(8, MIB, source, clock)
    assert window.limit == 4  # ceil(2 x 1.45 MB / 1 MiB) + 1
    clock.now += 0.01
    assert window.limit == 4 and len(reads) == 1  # not read again within REFRESH_S
    clock.now += 0.1
    assert window.limit == 8 and len(reads) == 2


def test_a_window_without_tcp_info_allows_the_most() -> None:
    assert Window(6, MIB).limit == 6
    assert Window(6, MIB, lambda: b"").limit == 6


def test_an_acquire_past_the_limit_waits_for_a_release() -> None:
    async def main() -> list[str]:
        window = Window(2, MIB)
        order: list[str] = []
        await window.acquire()
        await window.acquire()

        async def third() -> None:
            await window.acquire()
            order.append("third")

        task = asyncio.create_task(third())
        await asyncio.sleep(0.01)
        order.append("release")
        window.release()
        await task
        return order

    assert asyncio.run(main()) == ["release", "third"]
