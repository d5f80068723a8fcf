"""Jump start through real agents (design 3.3): a copy whose caps pace its NIC opens its
connections with the window of its streams' paced rate over a 100 ms link, and the
destination agent's target offers them a receive window as large from the start.

Two agents in lab hosts joined by one delayed link; the source agent copies into the
destination agent's builtin target. What is asserted is what the kernel did, read from
the connections themselves (the summary's count of streams whose first window the
BPF program set, and the window each stream's first telemetry sample shows), not a
time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from reservoir.lab.network import Lab
from reservoir.lab.spec import parse

from .agent_pair import AgentPair, Json, running
from .conftest import lab_of

pytestmark = pytest.mark.integration

SRC, DST = "10.207.3.1", "10.207.3.2"
IQN = "iqn.2026-11.org.reservoir:jump"
MiB = 1 << 20
STREAMS = 4
NIC_RATE = 62_500_000  # bytes/s of frames: 500 Mbit/s


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    link = {
        "name": "l1",
        "a": "src",
        "b": "dst",
        "a_addr": f"{SRC}/24",
        "b_addr": f"{DST}/24",
        "rate_mbit": 1000,
        "delay_ms": 50,
    }
    yield from lab_of(parse({"host": [{"name": "src"}, {"name": "dst"}], "link": [link]}))


class Agents(AgentPair):
    def copy(self, caps: Json, **more: Any) -> Json:
        """A copy over the link's one path, run to its end; it must complete."""
        body = {"streams": STREAMS, "extent_size": 4 * MiB, "caps": caps, **more}
        body["paths"] = [f"{SRC}={DST}:3260"]
        copy = self.wait(self.start_copy(body), timeout=120)
        assert copy["state"] == "completed", copy["last_error"]
        return copy

    def first_windows(self, copy_id: str) -> list[int]:
        """Each stream's congestion window at its first telemetry sample (bytes)."""
        first: dict[str, Json] = {}
        for r in self.stream_records(copy_id):
            first.setdefault(r["stream"], r)
        return [int(r["snd_cwnd"]) for r in first.values()]


@pytest.fixture(scope="module")
def agents(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agents]:
    work = tmp_path_factory.mktemp("jump-agents")
    with running(Agents(lab, work, 32 * MiB, addrs=(SRC, DST), iqn=IQN, port=8491)) as pair:
        yield pair


def test_a_copy_paced_per_nic_starts_every_stream_at_its_rate(agents: Agents) -> None:
    copy = agents.copy({"nic_pacing_rates": {"l1": NIC_RATE}})
    summary = copy["summary"]
    if summary["sessions_reused"]:
        pytest.fail("the copy took warm sessions: nothing was connected, nothing to jump")
    assert summary["jump_started"] == STREAMS
    assert agents.lun.read_bytes() == agents.src.data.read_bytes()
    # each stream's share of 500 Mbit/s for a 100 ms round trip: 1.5 MB (about 1000
    # segments); slow start from 10 segments is at 460 KB after 5 round trips
    wanted = NIC_RATE * 1448 / 1514 / STREAMS * 0.1
    windows = agents.first_windows(copy["id"])
    print(f"first windows {windows} B; a round trip of the paced share is {wanted:.0f} B")
    assert len(windows) == STREAMS and min(windows) >= 0.8 * wanted


def test_a_copy_without_nic_pacing_slow_starts(agents: Agents) -> None:
    # another congestion control: sessions of their own, not the warm ones of the first
    copy = agents.copy({}, congestion="cubic")
    assert copy["summary"]["sessions_opened"] > 0
    assert copy["summary"]["jump_started"] == 0
    print(f"first windows {agents.first_windows(copy['id'])} B")
