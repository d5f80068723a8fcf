"""A real coordinator probes a real link between two real agents (design: issue 5):
hosts a and b joined by a 200 Mbit/s link with 2 ms of delay each way (the delay line
does the rate limit, so the hosts' NICs are free for the agents' NIC pacer). The probe
runs iperf3 through the agents' control API; the stored measurements and the
recommendation must fit the link."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reservoir.lab.coord_site import AgentProc, Coordinator, inside, site_credentials
from reservoir.lab.network import Lab
from reservoir.lab.spec import parse

from .conftest import goodput_mbit, lab_of

pytestmark = pytest.mark.integration

A, B = "10.209.1.1", "10.209.1.2"
RATE_MBIT = 200
Json = dict[str, Any]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    link = {
        "name": "l1",
        "a": "a",
        "b": "b",
        "a_addr": f"{A}/24",
        "b_addr": f"{B}/24",
        "rate_mbit": RATE_MBIT,
        "delay_ms": 2,
    }
    yield from lab_of(parse({"host": [{"name": "a"}, {"name": "b"}], "link": [link]}))


def ok(r: httpx.Response, code: int = 201) -> Json:
    assert r.status_code == code, r.text
    data: Json = r.json()
    return data


def register(c: httpx.Client, agents: list[AgentProc]) -> str:
    ids = []
    for agent in agents:
        body: Json = {
            "name": agent.name,
            "control_url": agent.url,
            "nics": [{"name": "l1", "address": agent.addr, "speed_bps": 10**10}],
        }
        ids.append(ok(c.post("/agents", json=body))["id"])
    body = {
        "name": "l1",
        "agent_a": ids[0],
        "nic_a": "l1",
        "agent_b": ids[1],
        "nic_b": "l1",
        "capacity_bps": RATE_MBIT * 10**6,
        "rtt_ms": 4,
    }
    return str(ok(c.post("/links", json=body))["id"])


def test_coordinator_probe_of_a_200_mbit_link_recommends_from_plausible_rates(
    lab: Lab, tmp_path: Path
) -> None:
    creds = site_credentials(tmp_path)  # the coordinator's, below
    agents = [
        AgentProc(lab, host, "l1", addr, port, tmp_path, creds, tmp_path / "none", host=host)
        for host, addr, port in (("a", A, 8491), ("b", B, 8492))
    ]
    coordinator = Coordinator(lab, A, tmp_path, host="a")
    try:
        for agent in agents:
            with inside(lab.ns(agent.host)):
                agent.start()
        with inside(lab.ns("a")):
            coordinator.start()
        with inside(lab.ns("a")), coordinator.client() as c:
            link_id = register(c, agents)
            body = {"streams": [1, 4], "pacing": [0.95], "duration": 3, "directions": ["a-to-b"]}
            started = ok(c.post(f"/links/{link_id}/probe", json=body), 202)
            assert started["probe"]["state"] == "running"
            deadline = time.monotonic() + 60
            while (link := ok(c.get(f"/links/{link_id}"), 200))["probe"]["state"] == "running":
                assert time.monotonic() < deadline, "the probe did not end within 60 s"
                time.sleep(0.5)
    finally:
        coordinator.stop()
        for agent in agents:
            agent.stop()
    assert link["probe"]["state"] == "completed", link["probe"]["error"]
    rec = link["recommendation"]
    runs = rec["measurements"]
    for r in runs:
        print(
            f"  {r['direction']} {r['streams']:2d} streams, NIC pacing "
            f"{(r['pacing_bps'] or 0) / 1e6:5.1f} Mbit/s (paced {r['nic_paced']}): "
            f"{r['bits_per_second'] / 1e6:6.1f} Mbit/s, {r['retransmits']} retransmits"
        )
    print(f"  recommendation: {rec['streams']} streams, NIC pacing {rec['nic_pacing_bps']}")
    assert len(runs) == 4
    goodput = goodput_mbit(RATE_MBIT) * 1e6  # TCP payload of the TBF's frames
    best_unpaced = max(r["bits_per_second"] for r in runs if r["pacing_bps"] is None)
    assert 0.9 * goodput <= best_unpaced <= 1.05 * goodput
    paced = [r for r in runs if r["pacing_bps"] is not None]
    assert all(r["pacing_bps"] == 190_000_000 and r["nic_paced"] for r in paced)
    assert all(r["bits_per_second"] <= 1.03 * 0.95 * goodput for r in paced)
    assert rec["streams"] in (1, 4)
    assert set(rec["nic_pacing_bps"]) == {"a"} and rec["nic_pacing_bps"]["a"] in (None, 190_000_000)
    assert rec["measured_at"] == link["probe"]["finished_at"]
