"""Jump start through real agents (design 3.3): a copy whose caps pace its NIC opens its
connections with the window of its streams' paced rate over a 100 ms link, and the
destination agent's target offers them a receive window as large from the start.

Two agents in lab hosts joined by one delayed link; the source agent copies into the
destination agent's builtin target. What is asserted is what the kernel did, read from
the connections themselves (the summary's count of streams whose first window the
BPF program set, and the window each stream's first telemetry sample shows), not a
time."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reservoir.lab.coord_site import AgentProc, inside, site_credentials
from reservoir.lab.network import Lab
from reservoir.lab.spec import parse

from .conftest import lab_of

pytestmark = pytest.mark.integration

SRC, DST = "10.207.3.1", "10.207.3.2"
IQN = "iqn.2026-11.org.reservoir:jump"
MiB = 1 << 20
STREAMS = 4
NIC_RATE = 62_500_000  # bytes/s of frames: 500 Mbit/s
Json = dict[str, Any]


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


class Agents:
    def __init__(self, lab: Lab, work: Path, size: int) -> None:
        self.lab = lab
        creds = site_credentials(work)
        source, self.lun = work / "source.img", work / "lun.img"
        source.write_bytes(os.urandom(size))
        with open(self.lun, "wb") as f:
            f.truncate(size)
        self.src = AgentProc(lab, "src", "l1", SRC, 8491, work, creds, source)
        self.dst = AgentProc(lab, "dst", "l1", DST, 8492, work, creds, self.lun, IQN)
        self.headers = {"Authorization": f"Bearer {self.src.token}"}

    def api(self, method: str, path: str, **kw: Any) -> Any:
        with inside(self.lab.ns("src")):
            r = httpx.request(
                method, f"{self.src.url}/api/v1{path}", headers=self.headers, timeout=10, **kw
            )
        assert r.status_code < 300, r.text
        return r.json() if r.content else {}

    def copy(self, caps: Json, **more: Any) -> Json:
        body = {
            "source": str(self.src.data),
            "dest": f"iscsi://{DST}:3260/{IQN}/0",
            "streams": STREAMS,
            "extent_size": 4 * MiB,
            "paths": [f"{SRC}={DST}:3260"],
            "caps": caps,
            **more,
        }
        copy_id = self.api("POST", "/copies", json=body)["id"]
        deadline = time.monotonic() + 120
        while (copy := self.api("GET", f"/copies/{copy_id}"))["state"] in ("queued", "running"):
            assert time.monotonic() < deadline, f"copy still {copy['state']}"
            time.sleep(0.2)
        assert copy["state"] == "completed", copy["last_error"]
        return dict(copy)

    def first_windows(self, copy_id: str) -> list[int]:
        """Each stream's congestion window at its first telemetry sample (bytes)."""
        records = self.api("GET", f"/copies/{copy_id}/telemetry", params={"limit": 10_000})
        first: dict[str, Json] = {}
        for r in records:
            if r["type"] == "stream" and r["stream"] not in first:
                first[r["stream"]] = r
        return [int(r["snd_cwnd"]) for r in first.values()]


@pytest.fixture(scope="module")
def agents(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agents]:
    a = Agents(lab, tmp_path_factory.mktemp("jump-agents"), 32 * MiB)
    try:
        with inside(lab.ns("src")):
            a.dst.start()
            a.src.start()
        yield a
    finally:
        a.src.stop()
        a.dst.stop()


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
