"""One timed disk-to-disk copy through the servers of lab/transfer_peers.py, measured
the way design section 5 found fair:

- ``sync`` first, so that the dirty pages of an earlier run do not decide the figure;
- the clock runs from the clients' start until every destination file is fsynced
  (the fsync after the clients exit is inside the timed span);
- the destination, read back, must hash (xxh3-128) to the source's digest: a copy
  that differs says so (``matched``), and is a failed run, not a figure;
- CPU: each client's user + system time (its own rusage, from wait4) and each
  server's (``/proc/PID/stat``, with the children it reaped) across the copy.

A client that fails, or does not finish within ``timeout`` (xrdcp retries for
minutes when its server is gone), is stopped by PID and raises PeerError.
"""

from __future__ import annotations

import os
import select
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

from reservoir.lab.peers import PeerError, stop_process
from reservoir.lab.transfer_peers import Server, Tool, in_netns

__all__ = ["Leg", "PeerCopy", "digest_files", "timed_copy"]

READ_CHUNK = 8 << 20
POLL_S = 0.25
CLIENT_ENV = {"XRD_CONNECTIONRETRY": "1"}  # xrdcp: give up at once if nobody listens
Watch = Callable[[float, int], None]  # (seconds since the start, bytes on disk)


@dataclass(frozen=True)
class Leg:
    """One client: ``source`` (a file, or a part of one) to ``dest`` in the server's
    root, with ``streams``, run in ``netns`` (None: here)."""

    server: Server
    source: Path
    dest: Path
    streams: int
    netns: str | None = None


@dataclass
class PeerCopy:
    tool: Tool
    started: float  # Unix time the clock started
    seconds: float  # start to the last destination fsynced
    bytes: int
    client_cpu_s: float
    server_cpu_s: float
    matched: bool  # the destination hashes to the source's digest
    streams: int  # asked, over every leg
    streams_used: int  # given to the clients (xrdcp takes at most 15 each)
    progress: list[tuple[float, int]] = field(default_factory=list)
    """(seconds since the start, bytes on disk) every poll."""

    @property
    def goodput_bps(self) -> float:
        return self.bytes * 8 / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_s_per_gb(self) -> float:
        return (self.client_cpu_s + self.server_cpu_s) / (self.bytes / 1e9) if self.bytes else 0.0

    @property
    def note(self) -> str | None:
        """What the copy did not do as asked: the streams it clamped."""
        if self.streams_used >= self.streams:
            return None
        return f"{self.tool}: {self.streams} streams asked, {self.streams_used} used"


def digest_files(paths: Sequence[Path]) -> str:
    """xxh3-128 of the files one after the other."""
    h = xxhash.xxh3_128()
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(READ_CHUNK):
                h.update(chunk)
    return h.hexdigest()


def _on_disk(paths: Sequence[Path], total: int) -> int:
    """Bytes the destination files hold (allocated blocks: parallel streams write out
    of order), at most ``total``."""
    held = 0
    for p in paths:
        with suppress(FileNotFoundError):
            held += p.stat().st_blocks * 512
    return min(held, total)


def _fsync(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError as e:
        raise PeerError(f"the client exited 0 but wrote no {path}") from e
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _reap(procs: list[subprocess.Popen[bytes]], wait_s: float) -> float:
    """Waits up to ``wait_s`` for any of ``procs`` to exit (a pidfd wakes at once);
    reaps those that did with wait4, removes them from ``procs``, and returns their
    user + system seconds."""
    fds = {os.pidfd_open(p.pid): p for p in procs}
    try:
        select.select(list(fds), [], [], wait_s)
    finally:
        for fd in fds:
            os.close(fd)
    cpu = 0.0
    for p in list(procs):
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            cpu += usage.ru_utime + usage.ru_stime
            procs.remove(p)
    return cpu


def _output(log: Path, n: int = 600) -> str:
    return log.read_text(errors="replace").strip()[-n:] or "(no output)"


def timed_copy(
    legs: Sequence[Leg],
    digest: str,
    *,
    timeout: float,
    watch: Watch | None = None,
    on_start: Callable[[], object] | None = None,
) -> PeerCopy:
    """Every leg's client at once, the clock from their start to the destination
    fsynced; then the destination hashed against ``digest`` (of the sources one
    after the other). ``watch`` is called at every poll, ``on_start`` just before the
    clock starts."""
    servers = list({id(leg.server): leg.server for leg in legs}.values())
    dests = [leg.dest for leg in legs]
    total = sum(leg.source.stat().st_size for leg in legs)
    os.sync()
    server_cpu0 = sum(s.cpu_seconds() for s in servers)
    run = _Clients(legs, total)
    with ExitStack() as stack:
        stack.callback(run.stop)
        if on_start is not None:
            on_start()
        run.start(stack)
        run.wait(timeout, watch)
        for dest in dests:
            _fsync(dest)
        seconds = time.monotonic() - run.t0
    for s in servers:
        s.settle()
    return PeerCopy(
        tool=legs[0].server.tool,
        started=run.started,
        seconds=seconds,
        bytes=total,
        client_cpu_s=run.cpu,
        server_cpu_s=sum(s.cpu_seconds() for s in servers) - server_cpu0,
        matched=digest_files(dests) == digest,
        streams=sum(leg.streams for leg in legs),
        streams_used=sum(leg.server.client_streams(leg.streams) for leg in legs),
        progress=run.progress,
    )


@dataclass
class _Clients:
    """The clients of one copy: started together, reaped as they exit (their CPU time
    summed), stopped by PID if they outlive it."""

    legs: Sequence[Leg]
    total: int
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    outs: list[Path] = field(default_factory=list)
    argvs: list[list[str]] = field(default_factory=list)
    progress: list[tuple[float, int]] = field(default_factory=list)
    cpu: float = 0.0
    started: float = 0.0
    t0: float = 0.0

    def start(self, stack: ExitStack) -> None:
        env = {**os.environ, **CLIENT_ENV}
        self.argvs = [
            leg.server.client_argv(leg.source, leg.dest, leg.streams) for leg in self.legs
        ]
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="peer-clients-")))
        self.outs = [folder / f"client-{i}.log" for i in range(len(self.legs))]
        self.started, self.t0 = time.time(), time.monotonic()
        for leg, argv, log in zip(self.legs, self.argvs, self.outs, strict=True):
            with open(log, "wb") as out:
                cmd = in_netns(leg.netns, argv)
                try:
                    self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=out, env=env))
                except FileNotFoundError as e:
                    raise PeerError(f"{cmd[0]} is not installed") from e

    def wait(self, timeout: float, watch: Watch | None) -> None:
        """Until every client exited; PeerError if one failed or ``timeout`` passed."""
        dests = [leg.dest for leg in self.legs]
        pending = list(self.procs)
        while pending:
            self.cpu += _reap(pending, POLL_S)
            elapsed = time.monotonic() - self.t0
            self.progress.append((elapsed, _on_disk(dests, self.total)))
            if watch is not None:
                watch(*self.progress[-1])
            if pending and elapsed > timeout:
                raise PeerError(f"{self.argvs[0][0]} did not finish within {timeout:.0f} s")
        for proc, out, argv in zip(self.procs, self.outs, self.argvs, strict=True):
            if proc.returncode != 0:
                raise PeerError(f"{argv[0]} exited {proc.returncode}: {_output(out)}")

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc)
