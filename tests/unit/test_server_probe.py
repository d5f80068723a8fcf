"""Link probes: the recommendation rule, its use by transfers and copies, and
``POST /links/{id}/probe`` on an in-process coordinator with fake agents."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_volumes import FakeVolumes

from reservoir.server import ServerSettings, create_app
from reservoir.server.app import db
from reservoir.server.app.agent_client import AgentRef, AgentUnreachableError
from reservoir.server.app.models import LinkPublic, ProbeRunPublic
from reservoir.server.app.tables import Agent, AgentNic, Link
from reservoir.server.clients.link_cli import format_link, format_list
from reservoir.server.domain.pacing import copy_caps
from reservoir.server.domain.probe import recommend

USER = "unit-user-token-0123456789abcdef"
MiB = 1 << 20
MBIT = 10**6
Json = dict[str, Any]


def run(
    streams: int,
    bps: float,
    *,
    pacing: int | None = None,
    retransmits: int = 0,
    direction: str = "a-to-b",
    paced: bool | None = None,
) -> ProbeRunPublic:
    return ProbeRunPublic.model_validate(
        {
            "direction": direction,
            "streams": streams,
            "pacing_bps": pacing,
            "nic_paced": paced if paced is not None else (pacing is not None or None),
            "bits_per_second": bps,
            "retransmits": retransmits,
            "stream_bits_per_second": [bps / streams] * streams,
        }
    )


# ---------------------------------------------------------------- the rule


def test_recommend_takes_the_fewest_streams_within_3_percent_of_the_best() -> None:
    runs = [run(1, 400 * MBIT), run(4, 930 * MBIT), run(8, 950 * MBIT), run(16, 951 * MBIT)]
    assert recommend(runs).streams == 4  # 930 >= 0.97 x 951


def test_recommend_paces_the_nic_when_pacing_gives_as_much_with_fewer_retransmits() -> None:
    runs = [
        run(4, 940 * MBIT, retransmits=300),
        run(4, 935 * MBIT, pacing=950 * MBIT, retransmits=2),
        run(1, 500 * MBIT, retransmits=0),
    ]
    chosen = recommend(runs)
    assert chosen.streams == 4 and chosen.nic_pacing_bps == {"a": 950 * MBIT}


def test_recommend_leaves_the_nic_unpaced_when_pacing_costs_goodput() -> None:
    runs = [run(4, 940 * MBIT, retransmits=300), run(4, 700 * MBIT, pacing=10**9)]
    assert recommend(runs).nic_pacing_bps == {"a": None}


def test_recommend_ignores_a_paced_run_whose_nic_the_agent_could_not_pace() -> None:
    runs = [run(4, 900 * MBIT, retransmits=50), run(1, 950 * MBIT, pacing=10**9, paced=False)]
    chosen = recommend(runs)
    assert chosen.streams == 4 and chosen.nic_pacing_bps == {"a": None}


def test_recommend_takes_the_larger_stream_count_of_two_directions() -> None:
    runs = [
        run(1, 950 * MBIT),
        run(8, 950 * MBIT, direction="b-to-a"),
        run(1, 300 * MBIT, direction="b-to-a"),
    ]
    chosen = recommend(runs)
    assert chosen.streams == 8 and chosen.nic_pacing_bps == {"a": None, "b": None}


def test_recommend_without_runs_raises() -> None:
    with pytest.raises(ValueError, match="no runs"):
        recommend([])


# ---------------------------------------------------------------- copies


def _agent(agent_id: str) -> Agent:
    return Agent(
        id=agent_id, name=agent_id, nics=[AgentNic(name="e1", address="10.0.0.1", speed_bps=10**10)]
    )


def _link(rec: dict[str, int | None] | None) -> Link:
    link = Link(id="L1", name="l1", agent_a_id="A", nic_a="e1", agent_b_id="B", nic_b="e1")
    link.capacity_bps, link.rtt_ms = 10**9, 10.0
    link.recommended_pacing = rec
    return link


def test_copy_caps_pace_the_source_nic_at_the_probed_rate() -> None:
    link = _link({"a": 800 * MBIT, "b": None})
    caps = copy_caps(
        "per-nic",
        0.05,
        [link],
        _agent("A"),
        streams=4,
        sharing={"L1": 1},
        recommended={"L1": {"a": 800 * MBIT, "b": None}},
    )
    assert caps == {"nic_pacing_rates": {"e1": 800 * MBIT // 8}, "nic_pacing_flows": {"e1": 4}}


def test_copy_caps_leave_the_nic_unpaced_when_the_probe_said_so() -> None:
    link = _link(None)
    caps = copy_caps(
        "per-nic",
        0.05,
        [link],
        _agent("B"),
        streams=4,
        sharing={"L1": 1},
        recommended={"L1": {"a": 800 * MBIT, "b": None}},
    )
    assert caps is None


def test_copy_caps_without_a_recommendation_follow_the_plan() -> None:
    caps = copy_caps("per-nic", 0.05, [_link(None)], _agent("A"), streams=4, sharing={"L1": 1})
    assert caps == {
        "nic_pacing_rates": {"e1": int(0.95 * 10**9) // 8},
        "nic_pacing_flows": {"e1": 4},
    }


# ---------------------------------------------------------------- the API


class FakeAgents:
    """Agents answering ``/iperf`` like a 1 Gbit/s link: 300 Mbit/s per stream, the
    NIC's pacing rate when paced; unpaced runs lose packets."""

    def __init__(self, unreachable: bool = False, delay: float = 0.0) -> None:
        self.unreachable = unreachable
        self.delay = delay
        self.runs: dict[str, Json] = {}
        self.calls: list[tuple[str, str, str]] = []

    async def iperf(
        self, agent: AgentRef, method: str, path: str, body: Json | None = None
    ) -> Json:
        self.calls.append((agent.name, method, path))
        if self.unreachable:
            raise AgentUnreachableError(f"agent {agent.name!r}: All connection attempts failed")
        if method == "POST" and path == "/servers":
            return {"id": "s", "port": 5201, "state": "listening"}
        if method == "POST" and path == "/runs":
            assert body is not None
            run_id = f"r{len(self.runs)}"
            self.runs[run_id] = body
            return {"id": run_id, "state": "running"}
        if method == "GET":
            await asyncio.sleep(self.delay)
            body = self.runs[path.rsplit("/", 1)[1]]
            rate = body.get("nic_pacing_bps")
            bps = min(300e6 * body["streams"], 0.97 * rate if rate else 940e6)
            result = {
                "bits_per_second": bps,
                "retransmits": 0 if rate else 200,
                "stream_bits_per_second": [[bps / body["streams"]]] * body["streams"],
                "cpu_utilization_percent": {"host_total": 10.0},
            }
            return {"state": "completed", "result": result, "nic_paced": bool(rate)}
        return {"state": "stopped"}

    async def aclose(self) -> None:
        pass


VOLUMES = FakeVolumes()  # what the agents of two_agents_and_a_link report


@asynccontextmanager
async def coordinator(tmp_path: Path, agents: FakeAgents) -> AsyncIterator[httpx.AsyncClient]:
    settings = ServerSettings(
        database_url=f"sqlite:///{tmp_path / 'server.db'}",
        user_tokens=[USER],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        scheduler="off",
    )
    engine = db.make_engine(settings.database_url)
    db.upgrade(engine)
    app = create_app(settings, engine=engine, volume_lister=VOLUMES)
    app.state.prober.client = agents
    app.state.prober.poll = 0.01
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://server/api/v1",
            headers={"Authorization": f"Bearer {USER}"},
        ) as c:
            yield c
    finally:
        await app.state.prober.stop()
        engine.dispose()


def amain(fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(fn())


async def ok(response: Coroutine[Any, Any, httpx.Response], code: int = 201) -> Json:
    r = await response
    assert r.status_code == code, r.text
    data: Json = r.json()
    return data


async def two_agents_and_a_link(c: httpx.AsyncClient) -> tuple[Json, Json, Json]:
    agents = []
    for name, address in (("a", "10.0.0.1"), ("b", "10.0.0.2")):
        body: Json = {
            "name": name,
            "control_url": f"http://{name}:8740",
            "nics": [{"name": "eth0", "address": address, "speed_bps": 10**10}],
            "volumes": [{"name": "v0", "path": f"/{name}.img", "size_bytes": 64 * MiB}],
        }
        agents.append(await ok(c.post("/agents", json=VOLUMES.has(body))))
    body = {
        "name": "a-b",
        "agent_a": agents[0]["id"],
        "nic_a": "eth0",
        "agent_b": agents[1]["id"],
        "nic_b": "eth0",
        "capacity_bps": 10**9,
        "rtt_ms": 10,
    }
    return agents[0], agents[1], await ok(c.post("/links", json=body))


async def probed(c: httpx.AsyncClient, link_id: str, body: Json | None = None) -> Json:
    started = await ok(c.post(f"/links/{link_id}/probe", json=body), 202)
    assert started["probe"]["state"] == "running"
    for _ in range(500):
        link: Json = (await c.get(f"/links/{link_id}")).json()
        if link["probe"]["state"] != "running":
            return link
        await asyncio.sleep(0.01)
    raise AssertionError("the probe never ended")


def test_probe_measures_both_directions_and_stores_the_recommendation(tmp_path: Path) -> None:
    async def main() -> None:
        fake = FakeAgents()
        async with coordinator(tmp_path, fake) as c:
            _, _, link = await two_agents_and_a_link(c)
            assert link["probe"] is None and link["recommendation"] is None
            done = await probed(c, link["id"])
            assert done["probe"]["state"] == "completed" and done["probe"]["error"] is None
            rec = done["recommendation"]
            assert rec["streams"] == 4  # 4 x 300 Mbit/s reach the 950 Mbit/s pacing
            assert rec["nic_pacing_bps"] == {"a": 950 * MBIT, "b": 950 * MBIT}
            assert len(rec["measurements"]) == 2 * 4 * 2  # directions x streams x pacings
            assert rec["measured_at"] == done["probe"]["finished_at"]
            first = fake.runs["r0"]
            assert (first["host"], first["bind"], first["streams"]) == ("10.0.0.2", "10.0.0.1", 1)

    amain(main)


def test_probe_with_unreachable_agents_fails_and_keeps_the_last_recommendation(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        fake = FakeAgents()
        async with coordinator(tmp_path, fake) as c:
            _, _, link = await two_agents_and_a_link(c)
            before = await probed(c, link["id"], {"streams": [1, 4], "directions": ["a-to-b"]})
            fake.unreachable = True
            after = await probed(c, link["id"])
            assert after["probe"]["state"] == "failed"
            assert after["probe"]["error"] == "agent 'b': All connection attempts failed"
            assert after["recommendation"] == before["recommendation"]

    amain(main)


def test_probe_of_an_unknown_link_is_404_and_a_bad_body_422(tmp_path: Path) -> None:
    async def main() -> None:
        async with coordinator(tmp_path, FakeAgents()) as c:
            _, _, link = await two_agents_and_a_link(c)
            r = await c.post("/links/nope/probe")
            assert r.status_code == 404 and r.json()["detail"] == "no link 'nope'"
            for body in ({"streams": [0]}, {"duration": 61}, {"streams": [4, 4]}, {"x": 1}):
                r = await c.post(f"/links/{link['id']}/probe", json=body)
                assert r.status_code == 422, body
            assert (await c.get(f"/links/{link['id']}")).json()["probe"] is None

    amain(main)


def test_a_second_probe_while_one_runs_is_409(tmp_path: Path) -> None:
    async def main() -> None:
        async with coordinator(tmp_path, FakeAgents(delay=1.0)) as c:
            _, _, link = await two_agents_and_a_link(c)
            await ok(c.post(f"/links/{link['id']}/probe"), 202)
            r = await c.post(f"/links/{link['id']}/probe")
            assert r.status_code == 409 and "being probed already" in r.json()["detail"]

    amain(main)


async def _transfer(c: httpx.AsyncClient, a: Json, b: Json, link: Json, **kw: Any) -> Json:
    sets: list[Any] = []
    for agent in (a, b):
        body = {
            "name": f"s-{agent['name']}",
            "members": [{"agent_id": agent["id"], "volume": "v0"}],
        }
        r = await c.post("/volume-sets", json=body)
        sets.append(r.json() if r.status_code == 201 else None)
    if sets[0] is None:  # made by an earlier call
        listed = (await c.get("/volume-sets")).json()
        sets = sorted(listed, key=lambda s: s["name"])
    body = {"source": sets[0]["id"], "destination": sets[1]["id"], "paths": [link["id"]], **kw}
    return await ok(c.post("/transfers", json=body))


def test_transfers_take_the_probed_streams_and_pacing_unless_the_request_says(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with coordinator(tmp_path, FakeAgents()) as c:
            a, b, link = await two_agents_and_a_link(c)
            await probed(c, link["id"], {"directions": ["a-to-b"]})
            t = await _transfer(c, a, b, link)
            assert t["streams_per_pair"] == 4 and t["legs"][0]["streams"] == 4
            assert t["recommendation_applied"] == {
                "streams_per_pair": 4,
                "nic_pacing_bps": {link["id"]: {"a": 950 * MBIT}},
                "links": [link["id"]],
            }
            await ok(c.post(f"/transfers/{t['id']}/cancel"), 200)  # its destination free again
            explicit = await _transfer(c, a, b, link, streams_per_pair=16, pacing={"margin": 0.1})
            assert explicit["streams_per_pair"] == 16
            assert explicit["recommendation_applied"] is None

    amain(main)


# ---------------------------------------------------------------- the CLI


def test_link_cli_shows_the_probe_and_the_recommendation() -> None:
    link = LinkPublic.model_validate(
        {
            "id": "L1",
            "name": "a-b",
            "agent_a": "A",
            "nic_a": "eth0",
            "agent_b": "B",
            "nic_b": "eth0",
            "capacity_bps": 10**9,
            "rtt_ms": 10,
            "created_at": "2026-11-22T09:00:00Z",
            "probe": {"state": "completed", "started_at": "2026-11-22T09:00:00Z"},
            "recommendation": {
                "streams": 4,
                "nic_pacing_bps": {"a": 950 * MBIT, "b": None},
                "measured_at": "2026-11-22T09:01:00Z",
                "measurements": [run(4, 930 * MBIT, pacing=950 * MBIT).model_dump()],
            },
        }
    )
    listed = format_list([link])
    assert listed[1].split()[-7:] == ["completed", "4", "a:", "950.0", "Mbit/s,", "b:", "unpaced"]
    shown = "\n".join(format_link(link))
    assert "recommend 4 streams; NIC pacing a: 950.0 Mbit/s, b: unpaced" in shown
    assert "a-to-b     4        950.0 Mbit/s  930.0 Mbit/s  0" in shown
