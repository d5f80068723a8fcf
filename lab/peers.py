"""Real processes to test and measure against, started and stopped by PID.

- :class:`ReservoirTarget`: our own target as a separate process.
- :class:`Tgtd`: the tgt userspace target (Debian package ``tgt``).
- :func:`run_test_cu`: libiscsi's conformance suite, results parsed per test
  (a CUnit pass that printed ``[SKIPPED]`` is counted as a skip).
- :func:`run_iscsi_perf`: libiscsi's iscsi-perf, its rate parsed.

Every class is a context manager that leaves nothing running behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from reservoir.lab.errors import LabError

LOCALHOST = "127.0.0.1"


class PeerError(LabError):
    """A peer process that could not be started or answered wrongly."""


def free_port(host: str = LOCALHOST) -> int:
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = LOCALHOST) -> list[int]:
    """``count`` different free ports: each socket is held until all are chosen (one
    :func:`free_port` after another may be given the same port twice)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]


def wait_port(
    host: str, port: int, timeout: float = 10.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise PeerError(f"process exited with {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise PeerError(f"nothing listening on {host}:{port} after {timeout} s")


def stop_process(proc: subprocess.Popen[Any], timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; only the process we started."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


def reservoir_command() -> list[str]:
    exe = Path(sys.executable).with_name("reservoir")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "reservoir"]


@dataclass
class ReservoirTarget:
    """``reservoir target serve`` in a child process, listening on ``portals``
    ports of ``host`` (one portal group); logs kept in ``log_path``. It admits whom
    ``extra`` says (``--allow``, ``--chap``), or with ``open_access`` every initiator."""

    luns: Sequence[Path]
    iqn: str = "iqn.2026-11.org.reservoir:test"
    host: str = LOCALHOST
    portals: int = 1
    extra: Sequence[str] = ()
    open_access: bool = False
    log_path: Path | None = None
    ports: list[int] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    _log: BinaryIO | None = None

    @property
    def port(self) -> int:
        return self.ports[0]

    def url(self, lun: int = 0, portal: int = 0) -> str:
        return f"iscsi://{self.host}:{self.ports[portal]}/{self.iqn}/{lun}"

    def __enter__(self) -> ReservoirTarget:
        self.ports = free_ports(self.portals, self.host)
        cmd = [*reservoir_command(), "target", "serve"]
        cmd += [a for port in self.ports for a in ("--portal", f"{self.host}:{port}")]
        cmd += ["--iqn", self.iqn, *(a for p in self.luns for a in ("--lun", str(p)))]
        cmd += ["--open"] if self.open_access else []
        cmd += list(self.extra)
        self._log = open(self.log_path, "ab") if self.log_path else None
        out = self._log or subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=out)
        try:
            for port in self.ports:
                wait_port(self.host, port, proc=self.proc)
        except PeerError:
            self.__exit__(None, None, None)
            raise
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is not None:
            stop_process(self.proc)
        if self._log is not None:
            self._log.close()


@dataclass
class Tgtd:
    """tgtd on a private control port, one target with one file LUN, listening on
    ``portals`` ports of ``host``."""

    backing: Path
    iqn: str = "iqn.2026-11.org.reservoir:tgt"
    host: str = LOCALHOST
    portals: int = 1
    ports: list[int] = field(default_factory=list)
    control: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        return self.ports[0]

    def url(self, lun: int = 1, portal: int = 0) -> str:
        return f"iscsi://{self.host}:{self.ports[portal]}/{self.iqn}/{lun}"

    def _adm(self, *args: str, check: bool = True) -> None:
        cmd = ["tgtadm", "-C", str(self.control), "--lld", "iscsi", *args]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if check and done.returncode != 0:
            raise PeerError(f"{' '.join(cmd)}: {done.stderr.strip() or done.stdout.strip()}")

    def __enter__(self) -> Tgtd:
        if shutil.which("tgtd") is None:
            raise PeerError("tgtd is not installed (Debian package tgt)")
        self.ports = free_ports(self.portals, self.host)
        self.control = self.control or (self.port % 1000) + 100
        cmd = ["tgtd", "-f", "-C", str(self.control), "--iscsi", f"portal={self.host}:{self.port}"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(self.host, self.port, proc=self.proc)
            for port in self.ports[1:]:
                self._adm(
                    "--mode", "portal", "--op", "new", "--param", f"portal={self.host}:{port}"
                )
            self._adm("--mode", "target", "--op", "new", "--tid", "1", "-T", self.iqn)
            self._adm(
                "--mode",
                "logicalunit",
                "--op",
                "new",
                "--tid",
                "1",
                "--lun",
                "1",
                "-b",
                str(self.backing),
            )
            self._adm("--mode", "target", "--op", "bind", "--tid", "1", "-I", "ALL")
        except PeerError:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        # tgtd ignores SIGTERM: delete the target, then the system, then wait.
        self._adm("--mode", "target", "--op", "delete", "--force", "--tid", "1", check=False)
        self._adm("--mode", "system", "--op", "delete", check=False)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


# ---------------------------------------------------------------- libiscsi tools


@dataclass
class SuiteResult:
    """Per-test outcome of one iscsi-test-cu run."""

    passed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    details: dict[str, list[str]] = field(default_factory=dict)
    output: str = ""

    def summary(self) -> str:
        return f"{len(self.passed)} passed, {len(self.failed)} failed, {len(self.skipped)} skipped"


_SUITE_LINE = re.compile(r"^Suite: (\S+)")
_TEST_LINE = re.compile(r"^\s*Test: (\S+) \.\.\.")


def parse_test_cu(output: str) -> SuiteResult:
    """Split verbose iscsi-test-cu output into tests; a pass that printed
    ``[SKIPPED]`` is a skip, not a pass."""
    result = SuiteResult(output=output)
    suite, current = "", ""
    lines: list[str] = []
    for line in [*output.splitlines(), "Run Summary:"]:
        suite_match = _SUITE_LINE.match(line)
        start = _TEST_LINE.match(line)
        if (suite_match or start or line.startswith("Run Summary:")) and current:
            _record(result, current, lines)
            current = ""
        if suite_match:
            suite = suite_match.group(1)
        if start:
            current, lines = f"{suite}.{start.group(1)}", []
        if current:
            lines.append(line)
    return result


def _record(result: SuiteResult, name: str, lines: list[str]) -> None:
    """CUnit's verdict ("...FAILED" or a "FAILED" line) decides; a "[FAILED]" message
    alone is not a failure (tests print it for errors they expect)."""
    result.details[name] = lines
    text = "\n".join(lines)
    if re.search(r"(^|\.\.\.)FAILED\b", text, re.MULTILINE):
        result.failed.append(name)
    elif "[SKIPPED]" in text:
        result.skipped.append(name)
    else:
        result.passed.append(name)


def run_test_cu(
    url: str, test: str = "ALL", *, timeout: float = 900, extra: Sequence[str] = ()
) -> SuiteResult:
    cmd = ["iscsi-test-cu", "--dataloss", "--test", test, "-v", *extra, url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    return parse_test_cu(done.stdout + done.stderr)


_PERF_AVERAGE = re.compile(r"iops average (\d+) \(([\d.]+) MB/s\)")


@dataclass
class PerfResult:
    mb_per_s: float
    iops: float
    output: str


def run_iscsi_perf(
    url: str, *, blocks: int, depth: int = 32, random: bool = False, seconds: int = 10
) -> PerfResult:
    """iscsi-perf for ``seconds`` (it runs until interrupted): the last rate line it printed."""
    cmd = ["iscsi-perf", "-b", str(blocks), "-m", str(depth), *(["-r"] if random else []), url]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
    text = out.decode(errors="replace")
    return _parse_perf(text)


def _parse_perf(text: str) -> PerfResult:
    averages = _PERF_AVERAGE.findall(text)
    if not averages:
        raise PeerError(f"iscsi-perf printed no rate: {text[-500:]!r}")
    iops, mb = averages[-1]
    return PerfResult(float(mb), float(iops), text)


@contextlib.contextmanager
def sparse_file(path: Path, size: int) -> Iterator[Path]:
    with open(path, "wb") as f:
        f.truncate(size)
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
