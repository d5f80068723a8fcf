"""``/iperf`` routes over an in-process ASGI client: bad input is a clear 4xx/503 and
the agent keeps serving (no iperf3 process is started by these requests)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from reservoir.agent.control import Agent, AgentSettings, create_app

TOKEN = "unit-token-0123456789abcdef"
RUN = {"host": "127.0.0.1", "port": 5201, "streams": 1, "duration": 1}


@asynccontextmanager
async def api(tmp_path: Path, *, nic_pacing: bool = True) -> AsyncIterator[httpx.AsyncClient]:
    settings = AgentSettings(
        name="unit",
        tokens=[TOKEN],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        state_dir=tmp_path / "state",
        cwnd_caps="off",
        nic_pacing=nic_pacing,
    )
    agent = Agent(settings)
    transport = httpx.ASGITransport(app=create_app(agent))
    await agent.start()
    try:
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://agent/api/v1",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as c:
            c.agent = agent  # type: ignore[attr-defined]  # for the tests that change it
            yield c
    finally:
        await agent.stop()


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


async def still_serving(c: httpx.AsyncClient) -> None:
    assert (await c.get("/health")).status_code == 200
    assert (await c.get("/iperf/runs")).json() == []


def test_run_with_zero_streams_is_422(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path) as c:
            r = await c.post("/iperf/runs", json={**RUN, "streams": 0})
            assert r.status_code == 422 and "streams" in r.text
            await still_serving(c)

    run(main())


def test_run_longer_than_600_s_is_422(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path) as c:
            r = await c.post("/iperf/runs", json={**RUN, "duration": 601})
            assert r.status_code == 422 and "duration" in r.text
            await still_serving(c)

    run(main())


def test_run_to_a_host_name_is_422(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path) as c:
            r = await c.post("/iperf/runs", json={**RUN, "host": "example.org; rm -rf /"})
            assert r.status_code == 422 and "IPv4 or IPv6" in r.text

    run(main())


def test_run_bound_to_an_address_of_another_host_is_422(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path) as c:
            r = await c.post("/iperf/runs", json={**RUN, "bind": "192.0.2.1"})
            assert r.status_code == 422
            assert r.json()["detail"] == "192.0.2.1 is not an address of this host"
            await still_serving(c)

    run(main())


def test_server_on_an_address_of_another_host_is_422(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path) as c:
            r = await c.post("/iperf/servers", json={"address": "192.0.2.1"})
            assert r.status_code == 422
            assert r.json()["detail"] == "192.0.2.1 is not an address of this host"

    run(main())


def test_unknown_congestion_control_is_422(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path) as c:
            r = await c.post("/iperf/runs", json={**RUN, "congestion": "nosuchcc"})
            assert r.status_code == 422 and "'nosuchcc' is not available" in r.text

    run(main())


def test_nic_without_a_rate_is_422(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path) as c:
            r = await c.post("/iperf/runs", json={**RUN, "nic": "lo"})
            assert r.status_code == 422 and "go together" in r.text

    run(main())


def test_pacing_an_unknown_nic_is_422(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path) as c:
            body = {**RUN, "nic": "nosuchnic0", "nic_pacing_bps": 10**8}
            r = await c.post("/iperf/runs", json=body)
            assert r.status_code == 422
            assert r.json()["detail"] == "this host has no NIC 'nosuchnic0'"

    run(main())


def test_nic_pacing_on_an_agent_without_it_is_503(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path, nic_pacing=False) as c:
            r = await c.post("/iperf/runs", json={**RUN, "nic": "lo", "nic_pacing_bps": 10**8})
            assert r.status_code == 503 and "NIC pacing is off" in r.text

    run(main())


def test_missing_iperf3_is_503_for_servers_and_runs(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path) as c:
            c.agent.iperf.binary = "iperf3-not-installed"  # type: ignore[attr-defined]
            r = await c.post("/iperf/servers", json={"address": "127.0.0.1"})
            assert r.status_code == 503
            assert r.json()["detail"].startswith("iperf3 is not installed")
            r = await c.post("/iperf/runs", json=RUN)
            assert r.status_code == 503
            await still_serving(c)

    run(main())


def test_unknown_run_and_server_are_404(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path) as c:
            assert (await c.get("/iperf/runs/nope")).status_code == 404
            assert (await c.get("/iperf/servers/nope")).status_code == 404
            assert (await c.delete("/iperf/servers/nope")).status_code == 404

    run(main())


def test_iperf_routes_need_the_token(tmp_path: Path) -> None:
    async def main() -> None:
        async with api(tmp_path) as c:
            r = await c.post("/iperf/runs", json=RUN, headers={"Authorization": ""})
            assert r.status_code == 401

    run(main())
