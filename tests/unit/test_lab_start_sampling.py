"""What bench_start reads from the receiver's counters: the first data of a copy and
when it first arrived at 90% of the bottleneck for a whole window (synthetic samples)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from reservoir.lab._start_sampling import DATA, read_rx, start_of

PROC_NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs
    lo:     100       1    0    0    0     0          0         0      100       1    0
    l1: 5000000    4000    0    0    0     0          0         0     9000      70    0
    l2: 3000000    2000    0    0    0     0          0         0     8000      60    0
"""
RATE = 125e6  # bytes per second: 1 Gbit/s
RTT = 0.1
STEP = 0.002


def test_read_rx_adds_the_links_received_bytes() -> None:
    assert read_rx(PROC_NET_DEV, ["l1", "l2"]) == 8_000_000
    assert read_rx(PROC_NET_DEV, ["l2"]) == 3_000_000


def samples(rate_at: Callable[[float], float], until: float = 3.0) -> list[tuple[float, int]]:
    """Cumulative bytes every STEP seconds of a receiver at ``rate_at(t)`` B/s."""
    got, total, t = [], 0.0, 0.0
    while t < until:
        got.append((t, int(total)))
        total += rate_at(t) * STEP
        t = round(t + STEP, 6)
    return got


def test_a_copy_at_full_rate_from_its_first_byte_is_at_90_within_one_window() -> None:
    start = start_of(samples(lambda t: RATE if t >= 1.0 else 100.0), 0.5, RATE, RTT)
    assert start.first_byte == pytest.approx(1.0 + DATA / RATE, abs=2 * STEP)
    assert start.at_90 is not None and start.first_byte is not None
    # the first window that is 90% full of it: the least a copy can show
    assert start.at_90 - start.first_byte == pytest.approx(0.9 * RTT, abs=3 * STEP)


def test_a_slow_start_reaches_90_percent_rtts_later() -> None:
    def doubling(t: float) -> float:  # 1/64 of the rate at first, doubling every RTT
        return 0.0 if t < 1.0 else min(RATE, RATE / 64 * 2 ** int((t - 1.0) / RTT))

    start = start_of(samples(doubling), 0.5, RATE, RTT)
    assert start.at_90 is not None and start.first_byte is not None
    assert 6 * RTT <= start.at_90 - start.first_byte <= 8 * RTT


def test_a_burst_shorter_than_the_window_does_not_count() -> None:
    def burst(t: float) -> float:  # a small window sent at line rate, then waiting
        return RATE if t >= 1.0 and t % RTT < 0.02 else 0.0

    start = start_of(samples(burst), 0.5, RATE, RTT)
    assert start.first_byte is not None and start.at_90 is None


def test_no_data_after_the_request_is_no_start() -> None:
    start = start_of(samples(lambda t: RATE if t < 0.4 else 0.0), 0.5, RATE, RTT)
    assert (start.first_byte, start.at_90) == (None, None)
