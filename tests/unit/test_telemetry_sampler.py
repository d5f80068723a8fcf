"""StreamSampler and JSON-lines records, fed with crafted TCP_INFO bytes."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path

import pytest

from reservoir.agent import telemetry
from reservoir.agent.telemetry import JsonLinesWriter, Record, StreamSampler

# Offsets in struct tcp_info (include/uapi/linux/tcp.h).
OFFSETS = {
    "snd_mss": (16, "I"),
    "unacked": (24, "I"),
    "sacked": (28, "I"),
    "lost": (32, "I"),
    "retrans": (36, "I"),
    "pmtu": (60, "I"),
    "rtt": (68, "I"),
    "rttvar": (72, "I"),
    "snd_cwnd": (80, "I"),
    "total_retrans": (100, "I"),
    "pacing_rate": (104, "Q"),
    "bytes_acked": (120, "Q"),
    "notsent_bytes": (144, "I"),
    "delivery_rate": (160, "Q"),
    "busy_time": (168, "Q"),
    "rwnd_limited": (176, "Q"),
    "sndbuf_limited": (184, "Q"),
    "snd_wnd": (228, "I"),
}


def tcp_info_bytes(**values: int) -> bytes:
    raw = bytearray(248)
    for name, value in values.items():
        offset, fmt = OFFSETS[name]
        struct.pack_into("=" + fmt, raw, offset, value)
    return bytes(raw)


class FakeStream:
    """A source returning crafted TCP_INFO; ``gone`` makes it fail like a closed socket."""

    def __init__(self) -> None:
        self.acked = 0
        self.retrans = 0
        self.busy = self.rwnd = self.sndbuf = 0
        self.gone = False

    def __call__(self) -> bytes:
        if self.gone:
            raise OSError(9, "Bad file descriptor")
        return tcp_info_bytes(
            snd_mss=1448,
            snd_cwnd=10,
            rtt=20_000,
            rttvar=1_000,
            pmtu=1500,
            total_retrans=self.retrans,
            pacing_rate=125_000_000,
            bytes_acked=self.acked,
            delivery_rate=100_000_000,
            snd_wnd=65536,
            unacked=30,
            sacked=4,
            lost=2,
            retrans=1,
            notsent_bytes=9000,
            busy_time=self.busy,
            rwnd_limited=self.rwnd,
            sndbuf_limited=self.sndbuf,
        )


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_sampler(clock: FakeClock) -> StreamSampler:
    return StreamSampler(0.5, clock=clock, wallclock=lambda: 1_700_000_000.0 + clock.now)


def test_first_sample_is_only_a_baseline() -> None:
    sampler = make_sampler(FakeClock())
    sampler.register("s0", "p0", FakeStream())
    assert sampler.sample_once() == []


def test_a_baseline_at_registration_counts_what_the_stream_sends_before_a_sample() -> None:
    clock, stream = FakeClock(), FakeStream()
    sampler = make_sampler(clock)
    stream.acked = 5_000  # a warm session's earlier copies
    sampler.register("s0", "p0", stream, baseline=True)
    clock.now += 0.2
    stream.acked = 5_000 + 40_000
    (record,) = sampler.sample_once()
    assert record["bytes"] == 40_000
    assert record["seconds"] == pytest.approx(0.2)


def test_a_baseline_that_fails_at_registration_is_taken_by_the_next_sample() -> None:
    stream = FakeStream()
    stream.gone = True
    sampler = make_sampler(FakeClock())
    sampler.register("s0", "p0", stream, baseline=True)
    stream.gone = False
    assert sampler.sample_once() == [] and sampler.streams == {"s0": "p0"}


def test_record_has_acked_delta_rate_and_retransmit_delta() -> None:
    clock, stream = FakeClock(), FakeStream()
    sampler = make_sampler(clock)
    sampler.register("s0", "p0", stream)
    stream.acked, stream.retrans = 1_000, 2
    sampler.sample_once()
    clock.now += 0.5
    stream.acked, stream.retrans = 1_000 + 625_000, 5
    (record,) = sampler.sample_once()
    assert record["stream"] == "s0"
    assert record["path"] == "p0"
    assert record["bytes"] == 625_000
    assert record["bits_per_second"] == pytest.approx(10_000_000.0)
    assert record["retransmits"] == 3
    assert record["total_retrans"] == 5
    assert record["bytes_acked"] == 626_000
    assert record["time"] == pytest.approx(1_700_000_100.5)


def test_record_copies_gauges_with_iperf3_units() -> None:
    clock, stream = FakeClock(), FakeStream()
    sampler = make_sampler(clock)
    sampler.register("s0", "p0", stream)
    sampler.sample_once()
    clock.now += 0.5
    (record,) = sampler.sample_once()
    assert record["snd_cwnd"] == 14_480  # bytes: 10 segments x 1448
    assert (record["rtt"], record["rttvar"], record["pmtu"]) == (20_000, 1_000, 1500)
    assert record["delivery_rate"] == 100_000_000
    assert record["pacing_rate"] == 125_000_000
    assert record["snd_wnd"] == 65536


def test_record_says_what_held_the_stream_back_over_the_interval() -> None:
    clock, stream = FakeClock(), FakeStream()
    sampler = make_sampler(clock)
    sampler.register("s0", "p0", stream)
    stream.busy, stream.rwnd, stream.sndbuf = 1_000_000, 50_000, 7_000
    sampler.sample_once()
    clock.now += 0.5
    stream.busy, stream.rwnd, stream.sndbuf = 1_400_000, 150_000, 7_000
    (record,) = sampler.sample_once()
    assert record["busy_us"] == 400_000
    assert record["rwnd_limited_us"] == 100_000
    assert record["sndbuf_limited_us"] == 0
    assert record["notsent_bytes"] == 9000
    assert record["in_flight_bytes"] == (30 - 4 - 2 + 1) * 1448


def test_counter_going_backwards_counts_as_zero() -> None:
    clock, stream = FakeClock(), FakeStream()
    sampler = make_sampler(clock)
    sampler.register("s0", "p0", stream)
    stream.acked = 5_000
    sampler.sample_once()
    clock.now += 0.5
    stream.acked = 10
    (record,) = sampler.sample_once()
    assert record["bytes"] == 0
    assert record["bits_per_second"] == 0


def test_stream_that_disappears_is_dropped() -> None:
    clock, alive, dying = FakeClock(), FakeStream(), FakeStream()
    sampler = make_sampler(clock)
    sampler.register("alive", "p0", alive)
    sampler.register("dying", "p1", dying)
    sampler.sample_once()
    dying.gone = True
    clock.now += 0.5
    records = sampler.sample_once()
    assert [r["stream"] for r in records] == ["alive"]
    assert sampler.streams == {"alive": "p0"}


def test_source_returning_no_bytes_is_dropped() -> None:
    sampler = make_sampler(FakeClock())
    sampler.register("s0", "p0", lambda: b"")
    sampler.sample_once()
    assert sampler.streams == {}


def test_unregister_stops_sampling() -> None:
    sampler = make_sampler(FakeClock())
    sampler.register("s0", "p0", FakeStream())
    sampler.unregister("s0")
    sampler.unregister("unknown")
    assert sampler.streams == {}


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError):
        StreamSampler(0)


def test_default_interval_samples_at_least_twice_a_second() -> None:
    assert StreamSampler().interval <= 0.5


def test_writer_appends_one_json_object_per_line(tmp_path: Path) -> None:
    out = tmp_path / "telemetry.jsonl"
    records: list[Record] = [{"stream": "s0", "bytes": 1}, {"stream": "s1", "rtt": None}]
    with JsonLinesWriter(out) as writer:
        assert writer.write(records) == 2
        assert writer.write(records[:1]) == 1
    assert writer.closed
    lines = out.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [*records, records[0]]


def test_writer_flushes_each_batch(tmp_path: Path) -> None:
    out = tmp_path / "telemetry.jsonl"
    writer = JsonLinesWriter(out)
    writer.write([{"stream": "s0"}])
    assert out.read_text() == '{"stream":"s0"}\n'
    writer.close()
    writer.close()
    with pytest.raises(ValueError):
        writer.write([])


async def _run_sampler_into(out: Path, stream: FakeStream) -> None:
    sampler = StreamSampler(0.02)
    sampler.register("s0", "p0", stream)
    with JsonLinesWriter(out) as writer:
        sampler.start(writer.write)
        for _ in range(5):
            stream.acked += 10_000
            await asyncio.sleep(0.02)
        with pytest.raises(RuntimeError):
            sampler.start(writer.write)
        await sampler.stop()
        await sampler.stop()


def test_running_sampler_writes_valid_json_lines(tmp_path: Path) -> None:
    out = tmp_path / "telemetry.jsonl"
    asyncio.run(_run_sampler_into(out, FakeStream()))
    lines = out.read_text().splitlines()
    assert len(lines) >= 2
    records = [json.loads(line) for line in lines]
    assert all(r["stream"] == "s0" and r["bytes"] >= 0 for r in records)
    assert sum(r["bytes"] for r in records) > 0


def test_public_surface_is_exactly_all() -> None:
    public = {name for name in vars(telemetry) if not name.startswith("_")}
    submodules = {"mptcp_info", "records", "sampler", "tcp_info"}
    assert public - submodules == set(telemetry.__all__)
