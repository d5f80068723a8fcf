"""netem as a lab line: the arguments that make it do what the delay line does."""

from __future__ import annotations

from typing import Any

from reservoir.lab.line_check import spec_for
from reservoir.lab.network import netem_args
from reservoir.lab.vm.bond import Samples


def link(**kw: Any) -> Any:
    args = {"rate_mbit": 100.0, "delay_ms": 10.0, "loss": 0.0, "jitter_us": 0.0} | kw
    return spec_for("netem", **args).links[0]


def test_rate_and_delay_with_room_for_what_is_in_flight_and_the_queue() -> None:
    # 62.5 MB/s: 50 ms in flight, and a queue of twice the delay at the rate (as
    # dline's), counted in full frames
    args = netem_args(link(rate_mbit=500.0, delay_ms=50.0))
    assert args[:3] == ["netem", "delay", "50ms"]
    assert args[args.index("rate") + 1] == "500mbit"
    assert int(args[args.index("limit") + 1]) == -(-(3_125_000 + 6_250_000) // 1514)
    assert "loss" not in args


def test_the_limit_never_falls_below_netem_s_own_default() -> None:
    assert netem_args(link())[-1] == "1000"  # 12.5 MB/s x 10 ms + 256 KiB: 256 frames


def test_jitter_is_uniform_from_the_delay_up_as_dline_adds_it() -> None:
    args = netem_args(link(jitter_us=2000.0))
    assert args[1:4] == ["delay", "11ms", "1ms"]  # uniform in 11 +- 1 ms: 10..12 ms


def test_loss_is_a_percentage() -> None:
    args = netem_args(link(loss=0.01))
    assert args[args.index("loss") + 1] == "1%"


def test_without_a_rate_only_the_delay_and_a_large_limit() -> None:
    assert netem_args(link(rate_mbit=0.0)) == ["netem", "delay", "10ms", "limit", "100000"]


def test_bulk_rate_leaves_out_the_first_and_last_megabyte() -> None:
    # 1 MB of log-in over 1 s, then 10 MB/s for 2 s, then 1 MB of checking over 1 s
    mb = 1 << 20
    points = [(0.0, 0), (1.0, mb), (2.0, 11 * mb), (3.0, 21 * mb), (4.0, 22 * mb)]
    assert Samples(points).bulk_rate() == 10 * mb
    assert Samples([(0.0, 0), (1.0, 100)]).bulk_rate() == 0.0
