"""iperf3 runs through the agent: the memory-to-memory baselines of a link.

The coordinator probes a link (``server/domain/probe.py``) and campaigns on real networks
measure their baselines through these, on the registered hosts:

- a **server** is ``iperf3 -s -1 -B ADDR -p PORT -J``, bound to one of this host's
  addresses, on a free port unless one is given. It serves one test and exits, or is
  killed after its ``timeout``; :meth:`IperfManager.start_server` returns once it
  listens (its socket shows in ``/proc/net/tcp``: connecting to find out would use up
  its one test).
- a **run** is an ``iperf3 -c HOST -p PORT -P N -t T -J`` client, run as a job: the
  request answers at once with the run's id, and the run's state is polled
  (``running`` -> ``completed`` with the parsed result, or ``failed`` with iperf3's
  error). It may bind a local address (``-B``), choose the congestion control
  (``-C``), pace every stream (``--fq-rate``, SO_MAX_PACING_RATE) or pace one NIC for
  its duration through the agent's NIC pacer (the qdisc the copies use, under the key
  ``iperf-<id>``, removed when the run ends).

At most :data:`MAX_ACTIVE` servers and as many runs at once; what is still running when
the agent stops is killed by PID and waited for. Errors (the tree, mapped to HTTP
statuses once, by the handler of ``errors.py``)::

    IperfError                  iperf3 gave no result            -> 500 iperf_failed
    +-- IperfUnavailableError   iperf3 is not installed, NIC pacing is off
    |                                                               -> 503 iperf_unavailable
    +-- BadIperfRequestError    address not on this host, unknown NIC or -C
    |                                                               -> 422 iperf_request_invalid
    +-- PortInUseError          the asked port is taken          -> 409 port_in_use
    +-- TooManyIperfError       MAX_ACTIVE of them are running   -> 429 too_many_requests
    +-- UnknownIperfError       no server or run with this id    -> 404 not_found
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import json
import logging
import shutil
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from ipaddress import ip_address
from pathlib import Path
from typing import Any

from fastapi import status

from reservoir.agent.control.errors import ControlError
from reservoir.agent.control.info import congestion_control
from reservoir.agent.control.models import (
    IperfResult,
    IperfRunCreate,
    IperfRunPublic,
    IperfServerCreate,
    IperfServerPublic,
)
from reservoir.agent.control.nic_pacing import NicPacer

__all__ = [
    "MAX_ACTIVE",
    "BadIperfRequestError",
    "IperfError",
    "IperfManager",
    "IperfUnavailableError",
    "PortInUseError",
    "TooManyIperfError",
    "UnknownIperfError",
    "parse_result",
]

log = logging.getLogger("reservoir.agent.iperf")

MAX_ACTIVE = 4  # servers, and as many client runs
KEEP_FINISHED = 64  # finished servers/runs remembered for polling
LISTEN_WAIT = 5.0  # seconds for a server to listen
RUN_GRACE = 30.0  # seconds beyond a run's duration before it is killed
SYS_NET = Path("/sys/class/net")
PROC_TCP = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


class IperfError(ControlError):
    """Base of this module's errors; the message is one clear line."""

    code = "iperf_failed"


class IperfUnavailableError(IperfError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    code = "iperf_unavailable"


class BadIperfRequestError(IperfError):
    status_code = status.HTTP_422_UNPROCESSABLE_CONTENT
    code = "iperf_request_invalid"


class PortInUseError(IperfError):
    status_code = status.HTTP_409_CONFLICT
    code = "port_in_use"


class TooManyIperfError(IperfError):
    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    code = "too_many_requests"


class UnknownIperfError(IperfError):
    status_code = status.HTTP_404_NOT_FOUND
    code = "not_found"


# ---------------------------------------------------------------- parsing


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def parse_result(doc: dict[str, Any]) -> IperfResult:
    """The client's ``-J`` document as an :class:`IperfResult`; raises
    :class:`IperfError` with iperf3's own message when the run failed."""
    if doc.get("error"):
        raise IperfError(f"iperf3: {doc['error']}")
    end = doc.get("end") or {}
    sent, received = end.get("sum_sent") or {}, end.get("sum_received") or {}
    if not received:
        raise IperfError("iperf3 gave no result (no end.sum_received)")
    per_stream: list[list[float]] = []
    for interval in doc.get("intervals") or []:
        for i, stream in enumerate(interval.get("streams") or []):
            if i == len(per_stream):
                per_stream.append([])
            per_stream[i].append(_num(stream.get("bits_per_second")))
    ends = [s.get("sender") or {} for s in end.get("streams") or []]
    cpu = end.get("cpu_utilization_percent") or {}
    return IperfResult(
        bits_per_second=_num(received.get("bits_per_second")),
        sent_bits_per_second=_num(sent.get("bits_per_second")),
        bytes_received=int(_num(received.get("bytes"))),
        seconds=_num(received.get("seconds")),
        streams=max(len(per_stream), len(ends)),
        retransmits=_opt_int(sent.get("retransmits")),
        stream_bits_per_second=per_stream,
        stream_retransmits=[_opt_int(s.get("retransmits")) for s in ends],
        cpu_utilization_percent={k: _num(v) for k, v in cpu.items()},
        congestion=end.get("sender_tcp_congestion"),
    )


def _json_error(out: bytes, err: bytes, returncode: int | None) -> str:
    """iperf3's error from its ``-J`` output, else its stderr, else its exit status."""
    with contextlib.suppress(ValueError):
        doc = json.loads(out)
        if isinstance(doc, dict) and doc.get("error"):
            return f"iperf3: {doc['error']}"
    text = err.decode(errors="replace").strip()
    return f"iperf3: {text}" if text else f"iperf3 exited with status {returncode}"


# ---------------------------------------------------------------- checks


def _family(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ip_address(address).version == 6 else socket.AF_INET


def bind_check(address: str, port: int = 0) -> int:
    """Binds ``address:port`` (0: a free port) and lets go; the port that was bound."""
    with socket.socket(_family(address), socket.SOCK_STREAM) as s:
        try:
            s.bind((address, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUseError(f"port {port} on {address} is in use") from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise BadIperfRequestError(f"{address} is not an address of this host") from None
            raise BadIperfRequestError(f"cannot bind {address}:{port}: {exc.strerror}") from None
        return int(s.getsockname()[1])


def listening(port: int, tables: tuple[Path, ...] = PROC_TCP) -> bool:
    """Whether a TCP socket of this network namespace listens on ``port``."""
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if (
                len(fields) > 3
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                return True
    return False


# ---------------------------------------------------------------- jobs


@dataclass
class ServerJob:
    request: IperfServerCreate
    port: int
    proc: asyncio.subprocess.Process
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    state: str = "listening"
    created: float = field(default_factory=time.time)
    finished: float | None = None
    error: str | None = None
    task: asyncio.Task[None] | None = None

    def public(self) -> IperfServerPublic:
        return IperfServerPublic(
            id=self.id,
            address=self.request.address,
            port=self.port,
            state=self.state,  # type: ignore[arg-type]  # one of the Literal's values
            created=self.created,
            finished=self.finished,
            error=self.error,
        )


@dataclass
class RunJob:
    request: IperfRunCreate
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    state: str = "running"
    created: float = field(default_factory=time.time)
    finished: float | None = None
    nic_pacing: str | None = None
    nic_paced: bool | None = None
    result: IperfResult | None = None
    error: str | None = None
    task: asyncio.Task[None] | None = None

    def public(self) -> IperfRunPublic:
        return IperfRunPublic(
            **self.request.model_dump(),
            id=self.id,
            state=self.state,  # type: ignore[arg-type]  # one of the Literal's values
            created=self.created,
            finished=self.finished,
            nic_pacing=self.nic_pacing,
            nic_paced=self.nic_paced,
            result=self.result,
            error=self.error,
        )


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Kills ``proc`` (by its PID) if it still runs, and waits for it."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    await proc.wait()


class IperfManager:
    """The agent's iperf3 servers and client runs."""

    def __init__(self, pacer: Callable[[], NicPacer | None], *, binary: str = "iperf3") -> None:
        self._pacer = pacer
        self.binary = binary
        self.servers: dict[str, ServerJob] = {}
        self.runs: dict[str, RunJob] = {}

    def _executable(self) -> str:
        path = shutil.which(self.binary)
        if path is None:
            raise IperfUnavailableError(f"iperf3 is not installed on this agent ({self.binary!r})")
        return path

    # -------------------------------------------------------- servers

    def get_server(self, server_id: str) -> ServerJob:
        try:
            return self.servers[server_id]
        except KeyError:
            raise UnknownIperfError(f"no iperf3 server {server_id!r}") from None

    async def start_server(self, request: IperfServerCreate) -> ServerJob:
        binary = self._executable()
        if sum(job.state == "listening" for job in self.servers.values()) >= MAX_ACTIVE:
            raise TooManyIperfError(f"{MAX_ACTIVE} iperf3 servers are running; try again later")
        port = bind_check(request.address, request.port or 0)
        argv = [binary, "-s", "-1", "-B", request.address, "-p", str(port), "-J"]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        job = ServerJob(request, port, proc)
        try:
            await self._until_listening(job)
        except BaseException:
            await _stop(proc)
            raise
        self._forget_old(self.servers)
        self.servers[job.id] = job
        job.task = asyncio.create_task(self._serve(job), name=f"iperf3-server-{job.id}")
        log.info("iperf3 server %s on %s:%d (pid %d)", job.id, request.address, port, proc.pid)
        return job

    async def _until_listening(self, job: ServerJob) -> None:
        deadline = time.monotonic() + LISTEN_WAIT
        while not listening(job.port):
            if job.proc.returncode is not None or time.monotonic() > deadline:
                await _stop(job.proc)
                out, err = await self._output(job.proc)
                raise PortInUseError(
                    f"iperf3 did not listen on port {job.port}: "
                    + _json_error(out, err, job.proc.returncode)
                )
            await asyncio.sleep(0.02)

    @staticmethod
    async def _output(proc: asyncio.subprocess.Process) -> tuple[bytes, bytes]:
        assert proc.stdout is not None and proc.stderr is not None
        return await proc.stdout.read(), await proc.stderr.read()

    async def _serve(self, job: ServerJob) -> None:
        try:
            out, err = await asyncio.wait_for(job.proc.communicate(), job.request.timeout)
        except TimeoutError:
            await _stop(job.proc)
            job.state = "timed-out"
            job.error = f"no test within {job.request.timeout:g} s: killed"
        except asyncio.CancelledError:
            await _stop(job.proc)
            job.state = "stopped"
            raise
        else:
            job.state = "finished" if job.proc.returncode == 0 else "failed"
            if job.proc.returncode != 0:
                job.error = _json_error(out, err, job.proc.returncode)
        finally:
            job.finished = time.time()

    async def stop_server(self, server_id: str) -> ServerJob:
        job = self.get_server(server_id)
        if job.task is not None and not job.task.done():
            job.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job.task
        return job

    # -------------------------------------------------------- client runs

    def get_run(self, run_id: str) -> RunJob:
        try:
            return self.runs[run_id]
        except KeyError:
            raise UnknownIperfError(f"no iperf3 run {run_id!r}") from None

    def start_run(self, request: IperfRunCreate) -> RunJob:
        binary = self._executable()
        self._check_run(request)
        if sum(job.state == "running" for job in self.runs.values()) >= MAX_ACTIVE:
            raise TooManyIperfError(f"{MAX_ACTIVE} iperf3 runs are running; try again later")
        self._forget_old(self.runs)
        job = RunJob(request)
        self.runs[job.id] = job
        job.task = asyncio.create_task(self._run(job, binary), name=f"iperf3-run-{job.id}")
        return job

    def _check_run(self, request: IperfRunCreate) -> None:
        if request.bind is not None:
            bind_check(request.bind)
        if request.congestion is not None:
            available = congestion_control()[1]
            if available and request.congestion not in available:
                raise BadIperfRequestError(
                    f"congestion control {request.congestion!r} is not available here "
                    f"({' '.join(available)})"
                )
        if request.nic is not None:
            if self._pacer() is None:
                raise IperfUnavailableError("NIC pacing is off on this agent (nic_pacing = false)")
            if not (SYS_NET / request.nic).exists():
                raise BadIperfRequestError(f"this host has no NIC {request.nic!r}")

    @staticmethod
    def argv(binary: str, r: IperfRunCreate) -> list[str]:
        argv = [binary, "-c", r.host, "-p", str(r.port), "-P", str(r.streams)]
        argv += ["-t", str(r.duration), "-J", "--connect-timeout", "5000"]
        if r.bind is not None:
            argv += ["-B", r.bind]
        if r.congestion is not None:
            argv += ["-C", r.congestion]
        if r.fq_rate_bps is not None:
            argv += ["--fq-rate", str(r.fq_rate_bps)]
        return argv

    async def _run(self, job: RunJob, binary: str) -> None:
        key = f"iperf-{job.id}"
        pacer = self._pacer() if job.request.nic is not None else None
        try:
            if pacer is not None:
                await self._pace(job, pacer, key)
            job.result = await self._client(self.argv(binary, job.request), job.request.duration)
            job.state = "completed"
        except IperfError as exc:
            job.state, job.error = "failed", str(exc)
        except asyncio.CancelledError:
            job.state, job.error = "failed", "stopped: the agent stopped"
            raise
        except Exception as exc:  # a failed run never takes the agent down
            log.exception("iperf3 run %s", job.id)
            job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            job.finished = time.time()
            if pacer is not None:
                pacer.clear(key)

    async def _pace(self, job: RunJob, pacer: NicPacer, key: str) -> None:
        nic, bps = job.request.nic, job.request.nic_pacing_bps
        assert nic is not None and bps is not None
        pacer.set(key, {nic: max(1, bps // 8)})
        await asyncio.to_thread(pacer.flush)
        job.nic_paced = nic in pacer.applied and nic not in pacer.errors
        job.nic_pacing = pacer.describe({nic: bps // 8}) or f"{nic} not paced"

    async def _client(self, argv: list[str], duration: int) -> IperfResult:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), duration + RUN_GRACE)
        except TimeoutError:
            raise IperfError(
                f"iperf3 still ran {RUN_GRACE:g} s after its duration: killed"
            ) from None
        finally:
            await _stop(proc)
        try:
            doc = json.loads(out)
        except ValueError:
            raise IperfError(_json_error(out, err, proc.returncode)) from None
        if not isinstance(doc, dict):
            raise IperfError("iperf3 printed no JSON object")
        return parse_result(doc)

    # -------------------------------------------------------- both

    @staticmethod
    def _forget_old(jobs: dict[str, Any]) -> None:
        done = [k for k, j in jobs.items() if j.finished is not None]
        for k in itertools.islice(done, max(0, len(done) - KEEP_FINISHED + 1)):
            del jobs[k]

    async def close(self) -> None:
        """Kills every server and run still going (by PID) and waits for them."""
        jobs: list[ServerJob | RunJob] = [*self.servers.values(), *self.runs.values()]
        tasks = [job.task for job in jobs if job.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
