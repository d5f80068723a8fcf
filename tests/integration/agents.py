"""A real agent for the coordinator's tests: its API on a uvicorn server in a thread
(as test_agent_api.py runs it), its builtin target serving LUN files, and source files
as its ``source_volumes``; the bodies that register them with a coordinator."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from reservoir.agent.control import Agent, AgentSettings, CopyFn
from reservoir.agent.control import make_server as make_agent_server
from reservoir.agent.target import config as tcfg
from reservoir.agent.transfer import copy as engine_copy
from reservoir.lab.peers import free_ports
from reservoir.server.app.core.agent_credentials import AgentCredentials

from .servers import running

__all__ = ["API_TOKEN", "CREDENTIALS", "RunningAgent", "key_file", "real_agent"]

API_TOKEN = "itest-agents-api-token-0123456789"
KEY = bytes(range(32))  # the secret key of the coordinators these agents are registered with
CREDENTIALS = AgentCredentials(KEY)
MiB = 1 << 20
Json = dict[str, Any]


@dataclass
class RunningAgent:
    """A running agent: where it listens, its volumes' files, its target's name."""

    name: str
    url: str
    sources: list[Path]
    luns: list[Path]
    iqn: str
    portal: str  # HOST:PORT of its builtin target
    size: int
    agent: Agent = field(repr=False)
    token: str = field(default=API_TOKEN, repr=False)
    used: int = 0  # source files handed out by next_source

    def accept(self, name: str) -> None:
        """Lets a coordinator of :data:`KEY` call this agent as agent ``name`` (its
        control token, derived from the key and the name)."""
        settings = self.agent.settings
        digest = SecretStr(CREDENTIALS.control_digest(name))
        self.agent.settings = settings.model_copy(update={"tokens": [*settings.tokens, digest]})

    def source(self, name: str, index: int = 0, size: int | None = None) -> Json:
        """A path volume of the registration body: source file ``index``."""
        return {"name": name, "path": str(self.sources[index]), "size_bytes": size or self.size}

    def lun(self, name: str, index: int = 0, portal: str | None = None) -> Json:
        """A LUN volume of the registration body: LUN ``index`` of its target."""
        return {
            "name": name,
            "iqn": self.iqn,
            "lun": index,
            "size_bytes": self.size,
            "portal": portal or self.portal,
        }

    def next_source(self, name: str, size: int | None = None) -> Json:
        """A source file no registration used yet (for tests that register the same
        agent under many names)."""
        self.used += 1
        return self.source(name, self.used - 1, size)

    def registration(
        self, name: str, volumes: list[Json], *, trusted: bool = True, **extra: Any
    ) -> Json:
        """The ``POST /agents`` body: one loopback NIC and ``volumes``; the agent accepts
        the coordinator's token for ``name`` unless not ``trusted``."""
        if trusted:
            self.accept(name)
        return {
            "name": name,
            "control_url": self.url,
            "nics": [{"name": "lo", "address": "127.0.0.1", "speed_bps": 10**10}],
            "volumes": volumes,
            **extra,
        }


def key_file(folder: Path) -> Path:
    """:data:`KEY` in ``folder/server.key`` (mode 0600), as a coordinator keeps its key:
    the ``secret_key_file`` of coordinators that register these agents."""
    path = folder / "server.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(KEY.hex() + "\n")
    return path


def _blank(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


@contextmanager
def real_agent(
    folder: Path,
    name: str,
    *,
    sources: int = 0,
    luns: int = 0,
    size: int = 64 * MiB,
    copy_fn: CopyFn = engine_copy,
    tls: tuple[Path, Path] | None = None,
) -> Iterator[RunningAgent]:
    """The agent ``name`` with ``sources`` source files and ``luns`` LUN files (sparse,
    ``size`` bytes each) in ``folder/name``, serving until the block ends; over HTTPS
    with ``tls`` (certificate, key)."""
    home = folder / name
    home.mkdir(parents=True)
    files = [_blank(home / f"src{i}.img", size) for i in range(sources)]
    lun_files = [_blank(home / f"lun{i}.img", size) for i in range(luns)]
    iqn = f"iqn.2026-11.org.reservoir:{name}"
    port, api_port = free_ports(2)  # the target's portal, the agent's API: never the same
    target = None
    if luns:
        target = home / "target.toml"
        config = tcfg.TargetConfig(
            portals=[("127.0.0.1", port)],
            targets=[
                tcfg.Target(
                    iqn=iqn,
                    luns=[tcfg.Lun(i, str(p)) for i, p in enumerate(lun_files)],
                    open=True,
                )
            ],
        )
        tcfg.save(config, target)
    settings = AgentSettings(
        name=name,
        listen=f"127.0.0.1:{api_port}",
        tokens=[API_TOKEN],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        state_dir=home / "state",
        target_config=target,
        source_volumes=files,
        cwnd_caps="pacing-rate",  # the agent runs in the test process: no cgroup move
        tls_cert=tls[0] if tls else None,
        tls_key=tls[1] if tls else None,
    )
    agent = Agent(settings, copy_fn=copy_fn)
    with running(make_agent_server(settings, agent), f"agent-{name}"):
        yield RunningAgent(
            name=name,
            url=f"{'https' if tls else 'http'}://127.0.0.1:{settings.port}",
            sources=files,
            luns=lun_files,
            iqn=iqn,
            portal=f"127.0.0.1:{port}",
            size=size,
            agent=agent,
        )
