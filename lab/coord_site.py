"""The processes of :mod:`reservoir.lab.bench_coordinator` in the lab: two source agents
and the coordinator in host src, two destination agents (each serving one LUN file with
its builtin target) in host dst; and the bench's way into src's network namespace, where
it talks to the coordinator's API.

The agents and the coordinator of one work folder share its secret key
(``WORK/server.key``, made by :func:`site_credentials` if missing): each agent accepts
the digest of the control token the coordinator derives for its name, as an operator
configures it from ``reservoir server agent-credentials NAME``."""

from __future__ import annotations

import ctypes
import functools
import os
import secrets
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from reservoir.agent.target import config as tcfg
from reservoir.lab._lfn_copy import LINKS, Net
from reservoir.lab.bench_copy import Source, make_lun, write_source
from reservoir.lab.errors import LabError
from reservoir.lab.network import Lab
from reservoir.lab.peers import PeerError, reservoir_command, stop_process
from reservoir.server.app.core.agent_credentials import AgentCredentials

__all__ = ["AgentProc", "Coordinator", "Site", "TransferError", "inside", "site_credentials"]

CLONE_NEWNET = 0x40000000
SRC_PORTS = {"l1": 8471, "l2": 8472}
DST_PORTS = {"l1": 8473, "l2": 8474}
HEARTBEAT_INTERVAL = 5  # seconds: the agents' heartbeats to the coordinator
COORD_PORT = 8470
ISCSI_PORT = 3260
IQN = "iqn.2026-11.org.reservoir:coord-{link}"
KEY_FILE = "server.key"
Json = dict[str, Any]


def site_credentials(work: Path) -> AgentCredentials:
    """What the coordinator of ``work`` derives agents' tokens from (its key, made 0600
    in ``work`` if missing)."""
    return AgentCredentials.from_file(work / KEY_FILE)


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client: building one loads the CA store, and a client
    made per API call (a run's progress polls four times a second) made the campaign
    runner spend a quarter of a core on it, beside the agents it measures."""
    return ssl.create_default_context()


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextmanager
def inside(ns: str) -> Iterator[None]:
    """This thread in network namespace ``ns`` (sockets opened meanwhile live there)."""
    with open("/proc/thread-self/ns/net", "rb") as home, open(f"/run/netns/{ns}", "rb") as there:
        _setns(there.fileno())
        try:
            yield
        finally:
            _setns(home.fileno())


def wait_health(url: str, proc: subprocess.Popen[Any], log: Path, timeout: float = 20) -> None:
    """Until ``GET url/health`` answers 200 (the caller is in the right namespace)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise PeerError(f"{log.stem} exited ({proc.returncode}): {log.read_text()[-600:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise PeerError(f"{log.stem} not healthy after {timeout} s: {log.read_text()[-600:]}")
        time.sleep(0.1)


class TransferError(LabError):
    """The coordinator refused a request, or a transfer through it failed, was
    cancelled or did not complete in time (benchmarks and campaign runs)."""


@dataclass
class AgentProc:
    """``reservoir agent serve`` in a host: ``role`` src (a source file) or dst (a LUN)."""

    lab: Lab
    role: str
    link: str
    addr: str
    port: int
    work: Path
    credentials: AgentCredentials  # the coordinator's (site_credentials(work))
    data: Path
    iqn: str = ""
    proc: subprocess.Popen[Any] | None = None
    portals: tuple[str, ...] = ()  # the target's addresses (default: addr)
    cwnd_caps: str = "bpf"  # the agent setting (bpf, pacing-rate, off): the agent's default
    host: str = ""  # the lab host it runs in (default: role)
    target_mptcp: bool = False  # the agent setting: the target listens with MPTCP
    coordinator: str | None = None  # the coordinator's URL: heartbeats go there

    @property
    def name(self) -> str:
        return f"{self.role}-{self.link}"

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}"

    @property
    def token(self) -> str:
        """The token the coordinator presents to this agent (and the agent accepts)."""
        return self.credentials.control_token(self.name)

    @property
    def portal(self) -> str:
        return f"{self.addr}:{ISCSI_PORT}"

    def write_config(self) -> Path:
        home = (self.work / self.name).resolve()  # the agent reads the paths below from home
        home.mkdir(exist_ok=True)
        lines = [
            "[agent]",
            f'name = "{self.name}"',
            f'listen = "{self.addr}:{self.port}"',
            f'tokens = ["{self.credentials.control_digest(self.name)}"]',
            f'state_dir = "{home / "state"}"',
            f'cwnd_caps = "{self.cwnd_caps}"',
        ]
        if self.target_mptcp:
            lines.append("target_mptcp = true")
        if self.coordinator is not None:  # heartbeats, as an operator would set them up
            token = home / "coordinator.token"
            token.write_text(self.credentials.heartbeat_token(self.name) + "\n")
            token.chmod(0o600)
            lines += [
                f'coordinator = "{self.coordinator}"',
                f'coordinator_token_file = "{token}"',
                f"heartbeat_interval = {HEARTBEAT_INTERVAL}",
            ]
        if self.role == "src":  # the file it reads is one of its volumes
            lines.append(f'source_volumes = ["{self.data.resolve()}"]')
        if self.role == "dst":
            target = home / "target.toml"
            # through the page cache, the product's default: a loopback copy of 2 GiB
            # ran at 5.1 Gbit/s (2.4 CPU s/GB) against 2.7 (2.3) with O_DIRECT, whose
            # read-back (per extent and at the end) goes to the disk at ~1.2 GB/s
            luns = [tcfg.Lun(0, str(self.data))]
            conf = tcfg.TargetConfig(
                portals=[(a, ISCSI_PORT) for a in self.portals or (self.addr,)],
                targets=[tcfg.Target(iqn=self.iqn, luns=luns, open=True)],
            )
            tcfg.save(conf, target)
            lines.append(f'target_config = "{target}"')
        path = home / "agent.toml"
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o600)
        return path

    def start(self) -> None:
        argv = [*reservoir_command(), "agent", "serve", "--config", str(self.write_config())]
        log = self.work / f"agent-{self.name}.log"
        with open(log, "ab") as out:
            self.proc = self.lab.run(self.host or self.role, argv, stdout=out, stderr=out)
        wait_health(f"{self.url}/api/v1", self.proc, log)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)

    def registration(self, size: int) -> Json:
        """The ``POST /agents`` body: one NIC (the link's device), one volume."""
        volume: Json = {"name": "v0", "size_bytes": size}
        if self.role == "src":
            volume["path"] = str(self.data.resolve())  # as in its source_volumes
        else:
            volume.update(iqn=self.iqn, lun=0, portal=self.portal)
        return {
            "name": self.name,
            "control_url": self.url,
            "nics": [{"name": self.link, "address": self.addr, "speed_bps": 500_000_000}],
            "volumes": [volume],
        }


@dataclass
class Coordinator:
    """``reservoir server`` in host src on a SQLite file; killed and restarted at will."""

    lab: Lab
    addr: str
    work: Path
    user_token: str = field(default_factory=lambda: secrets.token_hex(24))
    proc: subprocess.Popen[Any] | None = None
    starts: int = 0
    host: str = "src"  # the lab host it runs in

    @property
    def api(self) -> str:
        return f"http://{self.addr}:{COORD_PORT}/api/v1"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            RESERVOIR_SERVER_USER_TOKENS=f'["{self.user_token}"]',
            RESERVOIR_SERVER_SECRET_KEY_FILE=str(self.work / KEY_FILE),
            RESERVOIR_SERVER_SCHEDULER_INTERVAL="0.5",
            # a coordinator killed and started again leads once its old lease runs out
            RESERVOIR_SERVER_LEASE_SECONDS="3",
        )
        return env

    def start(self) -> None:
        argv = [*reservoir_command(), "server", "--db", f"sqlite:///{self.work / 'server.db'}"]
        argv += ["--listen", f"{self.addr}:{COORD_PORT}"]
        log = self.work / "coordinator.log"
        with open(log, "ab") as out:
            out.write(f"---- start {self.starts + 1}\n".encode())
            out.flush()
            self.proc = self.lab.run(self.host, argv, stdout=out, stderr=out, env=self.env())
        self.starts += 1
        wait_health(self.api, self.proc, log, timeout=30)

    def kill(self) -> int:
        """SIGKILL (``ip netns exec`` execs the server: the same PID)."""
        assert self.proc is not None
        pid = self.proc.pid
        self.proc.kill()
        self.proc.wait()
        return pid

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.user_token}"}
        return httpx.Client(base_url=self.api, headers=headers, timeout=30, verify=_tls())


@dataclass
class Site:
    """Data files and processes: sources (SIZE/2 each) in src, LUNs in dst."""

    lab: Lab
    net: Net
    work: Path
    member: int
    sources: dict[str, Source] = field(default_factory=dict)
    src: dict[str, AgentProc] = field(default_factory=dict)
    dst: dict[str, AgentProc] = field(default_factory=dict)
    coordinator: Coordinator | None = None

    def prepare(self) -> None:
        credentials = site_credentials(self.work)
        for k in LINKS:
            src = self.sources[k] = write_source(self.work / f"source-{k}.img", self.member, 0)
            iqn = IQN.format(link=k)
            lun = make_lun(self.work / f"lun-{k}.img", self.member)
            self.src[k] = AgentProc(
                self.lab, "src", k, self.net.src[k], SRC_PORTS[k], self.work, credentials, src.path
            )
            self.dst[k] = AgentProc(
                self.lab, "dst", k, self.net.dst[k], DST_PORTS[k], self.work, credentials, lun, iqn
            )
        self.coordinator = Coordinator(self.lab, self.net.src["l1"], self.work)
        for a in self.agents():
            a.coordinator = f"http://{self.net.src['l1']}:{COORD_PORT}"

    def fresh_luns(self) -> None:
        """Zero the LUN files in place (the targets keep them open)."""
        for a in self.dst.values():
            with open(a.data, "r+b") as f:
                f.truncate(0)
                f.truncate(self.member)
                os.fsync(f.fileno())

    def agents(self) -> list[AgentProc]:
        return [*self.src.values(), *self.dst.values()]

    def start(self) -> Coordinator:
        for a in self.agents():
            a.start()
        assert self.coordinator is not None
        self.coordinator.start()
        return self.coordinator

    def stop(self) -> None:
        if self.coordinator is not None:
            self.coordinator.stop()
        for a in self.agents():
            a.stop()
