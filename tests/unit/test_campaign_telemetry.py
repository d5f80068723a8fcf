"""From the tools' reports to a campaign run's records (campaigns/run/telemetry.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from reservoir.campaigns.results import Event, Sample, Stream
from reservoir.campaigns.run.telemetry import (
    failover,
    intervals,
    iperf3_streams,
    stream_records,
)
from reservoir.lab.lfn_sampling import Bin

T0 = 1_795_000_000.0


def sample(t: float, stream: str, bps: float, **extra: Any) -> dict[str, Any]:
    return {"time": T0 + t, "stream": stream, "leg": 0, "bits_per_second": bps, **extra}


def names(label: str | None) -> str | None:
    return {"10.0.1.1=10.0.1.2:3260": "l1"}.get(label or "", label)


def test_samples_become_streams_with_times_from_the_run_start() -> None:
    rows = [sample(1.0, "1", 20e6), sample(0.5, "0", 10e6), sample(1.0, "0", 30e6)]
    streams = stream_records(rows, T0, names, 1448)
    assert [s.id for s in streams] == ["0.0", "0.1"]
    assert [(x.t, x.bps) for x in streams[0].samples] == [(0.5, 10e6), (1.0, 30e6)]
    assert streams[0].mss_bytes == 1448


def test_samples_before_the_start_and_repeats_are_dropped() -> None:
    rows = [sample(-0.5, "0", 1.0), sample(0.5, "0", 2.0), sample(0.5, "0", 3.0)]
    (stream,) = stream_records(rows, T0, names, 1448)
    assert [(x.t, x.bps) for x in stream.samples] == [(0.5, 2.0)]


def test_tcp_state_and_caps_are_kept_and_a_zero_cap_is_none() -> None:
    rows = [
        sample(0.5, "0", 1.0, snd_cwnd=14480, rtt=100_000, retransmits=2, cap=40),
        sample(1.0, "0", 1.0, cap=0, busy=0.5, rwnd_limited=0.25, sndbuf_limited=0),
    ]
    (stream,) = stream_records(rows, T0, names, 1448)
    assert stream.samples[0] == Sample(0.5, 1.0, 14480, 100_000, 2, 40)
    assert stream.samples[1].cap_segments is None
    limits = (
        stream.samples[1].busy,
        stream.samples[1].rwnd_limited,
        stream.samples[1].sndbuf_limited,
    )
    assert limits == (0.5, 0.25, 0.0)


def test_the_agents_path_label_is_named_after_the_campaign_path() -> None:
    rows = [sample(0.5, "0", 1.0, path="10.0.1.1=10.0.1.2:3260"), sample(0.5, "1", 1.0)]
    streams = stream_records(rows, T0, names, 1448)
    assert [s.path for s in streams] == ["l1", None]


def test_streams_are_ordered_by_number_not_text() -> None:
    rows = [sample(0.5, str(i), 1.0) for i in (10, 2, 1)]
    assert [s.id for s in stream_records(rows, T0, names, 1448)] == ["0.1", "0.2", "0.10"]


def stream(*points: tuple[float, float]) -> Stream:
    return Stream("s", None, [Sample(t, bps) for t, bps in points])


def test_intervals_sum_the_streams_per_second() -> None:
    a = stream((0.5, 10.0), (1.0, 10.0), (2.0, 20.0))
    b = stream((1.0, 5.0), (2.0, 5.0))
    got = intervals([a, b])
    assert [(i.t, i.bps) for i in got] == [(1.0, 15.0), (2.0, 25.0)]


def test_a_sample_spanning_two_bins_is_split_by_time() -> None:
    got = intervals([stream((0.5, 0.0), (1.5, 100.0), (2.0, 0.0))])
    assert [i.t for i in got] == [1.0, 2.0]
    assert [i.bps for i in got] == pytest.approx([50.0, 50.0])


def test_a_last_bin_of_a_few_milliseconds_is_left_out() -> None:
    got = intervals([stream((1.0, 10.0), (2.0, 10.0), (2.001, 99.0))])
    assert [i.t for i in got] == [1.0, 2.0]


def test_a_last_partial_bin_is_a_rate_over_its_own_length() -> None:
    got = intervals([stream((1.0, 10.0), (1.5, 30.0))])
    assert [(i.t, i.bps) for i in got] == [(1.0, 10.0), (1.5, 30.0)]


def test_no_samples_no_intervals() -> None:
    assert intervals([]) == []
    assert intervals([Stream("s", None)]) == []


def iperf3_doc() -> dict[str, Any]:
    def interval(end: float, rates: tuple[float, float]) -> dict[str, Any]:
        return {
            "streams": [
                {"socket": 5, "end": end, "bits_per_second": rates[0], "snd_cwnd": 1000,
                 "rtt": 200, "retransmits": 0},
                {"socket": 7, "end": end, "bits_per_second": rates[1], "snd_cwnd": 2000,
                 "rtt": 300, "retransmits": 1},
            ]
        }  # fmt: skip

    return {
        "start": {"tcp_mss_default": 1448},
        "intervals": [interval(1.0, (1e6, 2e6)), interval(2.0, (3e6, 4e6))],
    }


def test_iperf3_sockets_become_streams_shifted_by_the_clients_start() -> None:
    streams = iperf3_streams(iperf3_doc(), 0.25, "l2", "l2.1.")
    assert [s.id for s in streams] == ["l2.1.0", "l2.1.1"]
    assert {s.path for s in streams} == {"l2"}
    assert [(x.t, x.bps, x.cwnd_bytes, x.rtt_us) for x in streams[1].samples] == [
        (1.25, 2e6, 2000, 300),
        (2.25, 4e6, 2000, 300),
    ]
    assert streams[0].mss_bytes == 1448


def test_an_iperf3_document_without_intervals_has_no_streams() -> None:
    assert iperf3_streams({"start": {}}, 0.0, None, "x") == []


def bins(rates: Sequence[tuple[float, float]]) -> list[Bin]:
    """One bin a second from T0: (l1, l2) Mbit/s."""
    return [Bin(T0 + i + 1, 1.0, {"l1": l1, "l2": l2}) for i, (l1, l2) in enumerate(rates)]


def cut(down: float, up: float) -> list[Event]:
    return [Event(down, "link-down", "l1"), Event(up, "link-up", "l1")]


def test_failover_counts_the_shortfall_of_the_other_links_while_one_is_down() -> None:
    # l2 carried 500 before the cut at 4 s; after it, 250 for 2 s, then 500 again.
    series = [(500, 500)] * 4 + [(0, 250), (0, 250)] + [(0, 500)] * 4 + [(500, 500)] * 2
    got = failover(bins(series), cut(4.0, 10.0), T0)
    assert got is not None
    assert got.lost_seconds == pytest.approx(1.0)  # 2 s at half the rate
    assert got.back_after_s == pytest.approx(1.0)  # the first full bin after 10 s


def test_failover_says_never_when_the_link_does_not_come_back() -> None:
    series = [(500, 500)] * 4 + [(0, 500)] * 8
    got = failover(bins(series), cut(4.0, 8.0), T0)
    assert got is not None and got.back_after_s is None
    assert got.lost_seconds == 0.0


def test_no_failover_figures_without_a_cut_and_restore_or_other_links() -> None:
    series = [(500, 0)] * 6
    assert failover(bins(series), [Event(2.0, "link-down", "l1")], T0) is None
    assert failover(bins(series), cut(2.0, 4.0), T0) is None  # l2 carried nothing
    assert failover([], cut(2.0, 4.0), T0) is None
