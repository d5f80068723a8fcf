"""One TCP_INFO snapshot of an MPTCP connection from its subflows'."""

from __future__ import annotations

from reservoir.agent.telemetry import TcpInfo
from reservoir.agent.telemetry.mptcp_info import combine


def subflow(**values: int) -> TcpInfo:
    base = {"sacked": 0, "lost": 0, "retrans": 0, **values}
    return TcpInfo(length=280, state=1, snd_mss=1448, pmtu=1500, **base)


def test_counters_add_up_and_the_connection_is_busy_while_any_subflow_is() -> None:
    first = subflow(bytes_acked=1000, total_retrans=2, snd_cwnd=10, unacked=5, rtt=0, busy_time=700)
    second = subflow(
        bytes_acked=4000, total_retrans=3, snd_cwnd=30, unacked=7, rtt=90_000, busy_time=900
    )
    both = combine([first, second])
    assert (both.bytes_acked, both.total_retrans, both.snd_cwnd) == (5000, 5, 40)
    assert both.in_flight_bytes == 12 * 1448
    assert both.busy_time == 900
    assert both.rtt == 90_000  # the smallest RTT measured: the first has none yet
    assert (both.state, both.snd_mss, both.length) == (1, 1448, 280)  # the first's


def test_a_field_no_subflow_has_stays_unknown() -> None:
    both = combine([subflow(bytes_acked=1), subflow(bytes_acked=2)])
    assert both.rwnd_limited is None and both.bytes_acked == 3


def test_no_subflow_is_no_snapshot() -> None:
    assert combine([]).length == 0
