"""Real lab networks: namespaces, veths, TBF and the delay line, measured."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from collections.abc import Iterator

import pytest

from reservoir.lab import netns
from reservoir.lab.network import Lab, LabState, proc_start_time

from .conftest import goodput_mbit, iperf_mbit, lab_of, need_lab, one_link_spec, rtts

pytestmark = pytest.mark.integration

A, B = "10.201.1.1", "10.201.1.2"


@pytest.fixture(scope="module")
def direct_lab() -> Iterator[Lab]:
    yield from lab_of(one_link_spec(rate_mbit=200))


@pytest.fixture(scope="module")
def delayed_lab() -> Iterator[Lab]:
    yield from lab_of(one_link_spec(rate_mbit=100, delay_ms=20))


def test_direct_link_answers(direct_lab: Lab) -> None:
    times = rtts(direct_lab, "a", "b", B, 5)
    assert len(times) == 5
    assert max(times) < 5


def test_tbf_rate_within_5_percent(direct_lab: Lab) -> None:
    mbit = iperf_mbit(direct_lab, "a", "b", B, 3)
    expected = goodput_mbit(200)
    print(f"TBF 200 Mbit/s: {mbit:.1f} Mbit/s of TCP payload, expected {expected:.1f}")
    assert abs(mbit - expected) / expected < 0.05


def test_link_down_cuts_and_up_restores(direct_lab: Lab) -> None:
    direct_lab.link_down("l1")
    try:
        assert rtts(direct_lab, "a", "b", B, 2) == []
    finally:
        direct_lab.link_up("l1")
    assert len(rtts(direct_lab, "a", "b", B, 3)) >= 2


def test_delay_line_rtt(delayed_lab: Lab) -> None:
    times = rtts(delayed_lab, "b", "a", A, 20)[1:]  # the first one waits for ARP
    median = statistics.median(times)
    print(
        f"RTT through dline (2 x 20 ms): median {median:.2f} ms, {min(times):.2f}-{max(times):.2f}"
    )
    assert len(times) >= 18
    assert all(35 <= t <= 45 for t in times)


def test_delay_line_rate_within_10_percent(delayed_lab: Lab) -> None:
    mbit = iperf_mbit(delayed_lab, "a", "b", B, 3)
    expected = goodput_mbit(100)
    print(f"dline 100 Mbit/s, 20 ms: {mbit:.1f} Mbit/s of TCP payload, expected {expected:.1f}")
    assert abs(mbit - expected) / expected < 0.10


def test_teardown_when_the_body_raises() -> None:
    need_lab()
    lab = Lab(one_link_spec(rate_mbit=50, delay_ms=5))
    with pytest.raises(RuntimeError, match="boom"), lab:
        pids = [line.pid for line in lab.state.lines.values()]
        assert len(pids) == 1 and proc_start_time(pids[0]) is not None
        assert len([ns for ns in netns.names() if ns.startswith(lab.prefix)]) == 3
        raise RuntimeError("boom")
    assert not [ns for ns in netns.names() if ns.startswith(lab.prefix)]
    assert proc_start_time(pids[0]) is None
    assert "dline: stats a->b fwd_frames=" in lab.line_logs["l1"]
    lab.down()  # idempotent


def test_up_failure_removes_only_what_it_created() -> None:
    need_lab()
    lab = Lab(one_link_spec(rate_mbit=50, delay_ms=5), LabState(prefix=f"rsvt{os.getpid():x}"))
    foreign = lab.ns("b")  # someone else's namespace, in the way
    netns.add(foreign)
    try:
        with pytest.raises(netns.LabError, match=f"namespace {foreign} already exists"):
            lab.up()
        assert [ns for ns in netns.names() if ns.startswith(lab.prefix)] == [foreign]
    finally:
        netns.delete(foreign)


def line_stats(lab: Lab) -> dict[str, int]:
    """The a->b counters of the delay line's exit stats line."""
    line = lab.line_logs["l1"].split("dline: stats a->b ")[1].split(";")[0]
    return {k: int(v) for k, v in (kv.split("=") for kv in line.split())}


def test_delay_line_passes_offload_frames_whole() -> None:
    need_lab()
    with Lab(one_link_spec(delay_ms=2)) as lab:
        mbit = iperf_mbit(lab, "a", "b", B, 2)
    stats = line_stats(lab)
    print(f"dline without rate limit, 2 ms: {mbit:.0f} Mbit/s, {stats}")
    assert mbit > 1000
    assert stats["fwd_bytes"] / stats["fwd_frames"] > 4 * 1514


def test_delay_line_loss_and_jitter() -> None:
    need_lab()
    with Lab(one_link_spec(delay_ms=5, loss=0.2, jitter_us=2000)) as lab:
        times = rtts(lab, "a", "b", B, 60)
    answered = len(times) / 60  # each echo crosses the line twice: 0.8 ** 2 = 0.64
    print(f"dline loss 0.2: {answered:.2f} answered; RTT {min(times):.1f}-{max(times):.1f} ms")
    assert 0.4 <= answered <= 0.85
    assert line_stats(lab)["drop_frames"] > 0
    # 2 x 5 ms plus 0..2 ms of jitter each way (an echo may also wait for ARP)
    assert min(times) >= 10
    assert sum(10 <= t <= 14.5 for t in times) >= 0.8 * len(times)
    assert statistics.pstdev(t for t in times if t <= 14.5) > 0.3


def test_delay_line_queue_drops_tail() -> None:
    need_lab()
    with Lab(one_link_spec(delay_ms=5, rate_mbit=50, queue_bytes=30_000)) as lab:
        server = lab.run("b", ["iperf3", "-s", "-1", "-B", B], stdout=subprocess.DEVNULL)
        try:
            time.sleep(0.3)
            argv = ["iperf3", "-J", "-u", "-b", "200M", "-c", B, "-t", "2"]
            out = json.loads(lab.exec("a", argv, timeout=30).stdout)
        finally:
            server.wait(10)
    total = out["end"]["sum"]
    mbit = total["bits_per_second"] / 1e6 * (1 - total["lost_percent"] / 100)
    stats = line_stats(lab)
    print(f"dline 50 Mbit/s, 200 Mbit/s of UDP offered: {mbit:.1f} Mbit/s delivered, {stats}")
    assert 40 <= mbit <= 52
    assert stats["drop_frames"] > stats["fwd_frames"]


def test_qdisc_probe() -> None:
    need_lab()
    assert netns.has_qdisc("tbf rate 10mbit burst 10000 limit 10000")
    assert not netns.has_qdisc("nosuchqdisc")
