"""HTTPS everywhere it is configured: the coordinator's API (``tls_cert``/``tls_key``),
the agents' control API, the coordinator checking agents' certificates against
``agent_ca_file``, an agent's heartbeats checking the coordinator's against
``coordinator_ca_file``, and the CLI trusting a private CA through ``SSL_CERT_FILE``.
Certificates from a private CA made by openssl for 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reservoir.agent.control.heartbeat import Heartbeat
from reservoir.lab.certs import ServerCertificate, make_ca_and_server
from reservoir.lab.peers import free_port, reservoir_command
from reservoir.server import ServerSettings
from reservoir.server import make_server as make_coordinator
from reservoir.server.app.core.agent_credentials import AgentCredentials

from .agents import RunningAgent, key_file, real_agent
from .servers import running

pytestmark = pytest.mark.integration

USER = "itest-user-token-0123456789abcdef"
Json = dict[str, Any]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> ServerCertificate:
    return make_ca_and_server(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def agent(
    tmp_path_factory: pytest.TempPathFactory, certs: ServerCertificate
) -> Iterator[RunningAgent]:
    folder = tmp_path_factory.mktemp("agent")
    with real_agent(folder, "tls-agent", sources=2, tls=(certs.cert, certs.key)) as running_agent:
        yield running_agent


def coordinator_settings(tmp: Path, certs: ServerCertificate, **extra: Any) -> ServerSettings:
    return ServerSettings(
        database_url=f"sqlite:///{tmp / 'server.db'}",
        listen=f"127.0.0.1:{free_port()}",
        user_tokens=[USER],  # type: ignore[list-item]
        scheduler="off",
        secret_key_file=key_file(tmp),
        tls_cert=certs.cert,
        tls_key=certs.key,
        **extra,
    )


def registration(agent: RunningAgent, name: str) -> Json:
    agent.accept(name)
    return {
        "name": name,
        "control_url": agent.url,
        "nics": [{"name": "lo", "address": "127.0.0.1", "speed_bps": 10**10}],
        "volumes": [agent.source("vol0", 0)],
    }


def test_the_coordinator_serves_https_and_checks_agents_against_its_ca(
    tmp_path: Path, certs: ServerCertificate, agent: RunningAgent
) -> None:
    trusting = coordinator_settings(tmp_path, certs, agent_ca_file=certs.ca)
    with running(make_coordinator(trusting), "tls-coordinator"):
        url = f"https://127.0.0.1:{trusting.port}/api/v1"
        with pytest.raises(httpx.ConnectError):  # the system's store knows no private CA
            httpx.get(f"{url}/health", timeout=5)
        with pytest.raises(httpx.RemoteProtocolError):  # plain HTTP on the TLS port
            httpx.get(f"http://127.0.0.1:{trusting.port}/api/v1/health", timeout=5)
        headers = {"Authorization": f"Bearer {USER}"}
        context = ssl.create_default_context(cafile=str(certs.ca))
        with httpx.Client(base_url=url, headers=headers, verify=context, timeout=30) as c:
            health = c.get("/health").json()
            assert health["role"] == "leader" and health["leader_url"].startswith("https://")
            r = c.post("/agents", json=registration(agent, "trusted"))
            assert r.status_code == 201, r.text  # its volumes were asked over HTTPS
            assert r.json()["volumes"][0]["device_id"]


def test_a_coordinator_without_the_agents_ca_refuses_to_register_it(
    tmp_path: Path, certs: ServerCertificate, agent: RunningAgent
) -> None:
    settings = coordinator_settings(tmp_path, certs)  # no agent_ca_file
    with running(make_coordinator(settings), "tls-coordinator"):
        context = ssl.create_default_context(cafile=str(certs.ca))
        url = f"https://127.0.0.1:{settings.port}/api/v1"
        headers = {"Authorization": f"Bearer {USER}"}
        with httpx.Client(base_url=url, headers=headers, verify=context, timeout=30) as c:
            r = c.post("/agents", json=registration(agent, "untrusted"))
            assert r.status_code == 422, r.text
            assert "certificate" in r.text.lower()
            assert c.get("/agents").json() == []


def test_heartbeats_and_the_cli_reach_an_https_coordinator(
    tmp_path: Path,
    certs: ServerCertificate,
    agent: RunningAgent,
) -> None:
    settings = coordinator_settings(tmp_path, certs, agent_ca_file=certs.ca)
    with running(make_coordinator(settings), "tls-coordinator"):
        base = f"https://127.0.0.1:{settings.port}"
        context = ssl.create_default_context(cafile=str(certs.ca))
        headers = {"Authorization": f"Bearer {USER}"}
        with httpx.Client(base_url=f"{base}/api/v1", headers=headers, verify=context) as c:
            assert c.post("/agents", json=registration(agent, "beating")).status_code == 201
        token = AgentCredentials.from_file(settings.secret_key_path).heartbeat_token("beating")
        trusted = Heartbeat(base, token, 1.0, verify=context)
        untrusted = Heartbeat(base, token, 1.0)

        async def beat(heartbeat: Heartbeat) -> bool:
            async with heartbeat.client() as client:
                return await heartbeat.beat(client)

        assert asyncio.run(beat(trusted)) is True
        assert asyncio.run(beat(untrusted)) is False
        assert "certificate" in (untrusted.last_error or "").lower()
        cli = [*reservoir_command(), "transfer", "--server", base, "--token", USER, "list"]
        env = {**os.environ, "SSL_CERT_FILE": str(certs.ca)}
        done = subprocess.run(cli, capture_output=True, text=True, env=env, check=False)
        assert done.returncode == 0, done.stderr
        env.pop("SSL_CERT_FILE")
        refused = subprocess.run(cli, capture_output=True, text=True, env=env, check=False)
        assert refused.returncode == 1 and "certificate" in refused.stderr.lower()
