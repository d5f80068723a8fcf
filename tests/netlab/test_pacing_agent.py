"""A pacing plan applied by a real agent to a real copy (design 3.3): two agents in lab
hosts joined by one unshaped veth; the source agent copies into the destination
agent's builtin target with the caps the coordinator's plan gives.

- ``nic_pacing_rates``: the agent installs a pacing qdisc on its NIC while the copy
  runs and removes it after; the copy's streams together carry the NIC's rate.
- ``stream_pacing_rates``: each stream carries its own rate (SO_MAX_PACING_RATE).

Rates are compared on the TCP payload scale, from the agent's own telemetry in the
middle of the copy: the qdisc counts Ethernet frames (payload = rate x 1448 / 1514),
TCP's own pacing counts the payload of what it sends (payload = rate).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator

import pytest

from reservoir.lab.network import Lab
from reservoir.lab.spec import parse
from reservoir.pacing import nic

from .agent_pair import AgentPair, Json, running
from .conftest import lab_of

pytestmark = pytest.mark.integration

SRC, DST = "10.207.1.1", "10.207.1.2"
IQN = "iqn.2026-11.org.reservoir:pacing"
MiB = 1 << 20


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    link = {"name": "l1", "a": "src", "b": "dst", "a_addr": f"{SRC}/24", "b_addr": f"{DST}/24"}
    yield from lab_of(parse({"host": [{"name": "src"}, {"name": "dst"}], "link": [link]}))


class Agents(AgentPair):
    def copy(self, streams: int, caps: Json) -> str:
        return self.start_copy({"streams": streams, "extent_size": 4 * MiB, "caps": caps})

    def middle_samples(self, copy_id: str) -> list[Json]:
        """The copy's stream samples over the middle half of its run."""
        samples = [r for r in self.stream_records(copy_id) if r["bits_per_second"]]
        first, last = min(r["time"] for r in samples), max(r["time"] for r in samples)
        lo, hi = first + (last - first) / 4, last - (last - first) / 4
        return [r for r in samples if lo <= r["time"] <= hi]

    def stream_rates(self, copy_id: str) -> dict[str, float]:
        """Median bit/s of each stream over the middle half of the copy."""
        by_stream: dict[str, list[float]] = {}
        for r in self.middle_samples(copy_id):
            by_stream.setdefault(r["stream"], []).append(r["bits_per_second"])
        return {s: statistics.median(v) for s, v in by_stream.items()}

    def total_rate(self, copy_id: str) -> float:
        """Median over the sampler's passes (one time per pass) of the streams' summed
        bit/s, over the middle half of the copy: what the NIC carried. (The sum of each
        stream's median overstates it when the streams take turns.)"""
        by_pass: dict[float, float] = {}
        for r in self.middle_samples(copy_id):
            by_pass[r["time"]] = by_pass.get(r["time"], 0.0) + r["bits_per_second"]
        return statistics.median(by_pass.values())


@pytest.fixture(scope="module")
def agents(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agents]:
    work = tmp_path_factory.mktemp("pacing-agents")
    with running(Agents(lab, work, 64 * MiB, addrs=(SRC, DST), iqn=IQN, port=8481)) as pair:
        yield pair


def root_kind(lab: Lab) -> tuple[str, int | None]:
    q = nic.current("l1", lab.ns("src"))
    return q.kind, q.rate_bps


def test_nic_pacing_holds_while_the_copy_runs_and_goes_after(lab: Lab, agents: Agents) -> None:
    rate = 100_000_000  # well below what the copy does on a busy 2-core machine
    copy_id = agents.copy(4, {"nic_pacing_rates": {"l1": rate // 8}})
    deadline = time.monotonic() + 10
    while (state := agents.api("GET", f"/copies/{copy_id}")["state"]) != "running":
        assert time.monotonic() < deadline, state
        time.sleep(0.05)
    kind, installed = root_kind(lab)
    copy = agents.wait(copy_id)
    assert copy["state"] == "completed", copy["last_error"]
    assert (kind, installed) == ("tbf", rate)
    assert root_kind(lab)[0] != "tbf"  # removed with the copy
    assert agents.lun.read_bytes() == agents.src.data.read_bytes()
    total, expected = agents.total_rate(copy_id), rate * 1448 / 1514
    print(f"NIC paced at {rate / 1e6:.0f} Mbit/s: streams carry {total / 1e6:.1f} Mbit/s")
    assert total < expected * 1.03  # the NIC's rate holds (unpaced, the copy is far faster)
    # ...and it is what limits the copy: the streams keep it busy. Not tighter than this:
    # between extents a stream pauses for a round trip, more so when the 2 cores are busy.
    assert total > expected * 0.90


def test_stream_pacing_gives_each_stream_its_rate(agents: Agents) -> None:
    rates = {0: 40_000_000, 1: 80_000_000}
    caps = {"stream_pacing_rates": {str(s): r // 8 for s, r in rates.items()}}
    copy_id = agents.copy(2, caps)
    copy = agents.wait(copy_id)
    assert copy["state"] == "completed", copy["last_error"]
    measured = agents.stream_rates(copy_id)
    for stream, rate in rates.items():
        expected = rate
        got = measured[str(stream)]
        print(f"stream {stream} paced at {rate / 1e6:.0f} Mbit/s: {got / 1e6:.1f} Mbit/s")
        assert abs(got - expected) / expected < 0.03
