"""The processes of the LFN benchmark: the target in host dst, copies in host src, and
what the copies leave behind (summary line, telemetry records)."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from reservoir.lab.network import Lab
from reservoir.lab.peers import PeerError, reservoir_command, stop_process
from reservoir.lab.spec import Spec

IQN = "iqn.2026-11.org.reservoir:lfn"
PORT = 3260
LINKS = ("l1", "l2")
_REPORT = re.compile(r"^(path \S+: |copied |root hash )")
_SUMMARY = re.compile(
    r"copied (\d+) bytes in ([\d.]+) s \(([\d.]+) MB/s\); skipped (\d+) bytes \((\d+) extents\)"
    r" from the checkpoint; sent twice (\d+) bytes"
)


@dataclass(frozen=True)
class Net:
    """The addresses of hosts src and dst on links l1 and l2."""

    src: dict[str, str]
    dst: dict[str, str]

    @classmethod
    def of(cls, spec: Spec) -> Net:
        def addr(name: str, host: str) -> str:
            link = spec.link(name)
            return str((link.a_addr if link.a == host else link.b_addr).ip)

        return cls({k: addr(k, "src") for k in LINKS}, {k: addr(k, "dst") for k in LINKS})

    def portal(self, link: str) -> str:
        return f"{self.dst[link]}:{PORT}"

    def path_args(self) -> list[str]:
        return [a for k in LINKS for a in ("--path", f"{self.src[k]}={self.portal(k)}")]

    def url(self) -> str:
        return f"iscsi://{self.portal('l1')}/{IQN}/0"

    def link_of(self, path: str) -> str:
        """The link a telemetry path id goes over (``LOCAL=REMOTE:PORT``)."""
        return next((k for k in LINKS if path.endswith(f"={self.portal(k)}")), path)


@dataclass
class Target:
    """``reservoir target serve`` in host dst on the portals of both links."""

    lab: Lab
    net: Net
    lun: Path
    log: Path
    mptcp: bool = False
    proc: subprocess.Popen[Any] | None = None

    def start(self) -> None:
        argv = [*reservoir_command(), "target", "serve", "--iqn", IQN, "--lun", str(self.lun)]
        argv += ["--open"]  # the lab's own hosts only
        argv += [a for k in LINKS for a in ("--portal", self.net.portal(k))]
        argv += ["--mptcp"] if self.mptcp else []
        offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = self.lab.run("dst", argv, stdout=out, stderr=out)
        deadline = time.monotonic() + 15
        while b"ready" not in self.log.read_bytes()[offset:]:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise PeerError(f"target did not start: {self.log.read_text()[offset:][-600:]}")
            time.sleep(0.05)

    def kill(self) -> int:
        """SIGKILL to the target process (``ip netns exec`` execs it: same PID)."""
        assert self.proc is not None
        pid = self.proc.pid
        self.proc.kill()
        self.proc.wait()
        return pid

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)

    def __enter__(self) -> Target:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@dataclass
class Outcome:
    """A finished ``reservoir copy``: exit status, wall time, stdout and stderr."""

    status: int
    started: float
    seconds: float
    output: str

    def figure(self, group: int) -> int | None:
        """A field of the summary line: 1 copied, 4 skipped, 6 sent twice (bytes)."""
        m = _SUMMARY.search(self.output)
        return int(m.group(group)) if m else None

    def reported(self) -> str:
        m = _SUMMARY.search(self.output)
        return f"{m.group(2)} s, {m.group(3)} MB/s" if m else "none"

    def last_line(self) -> str:
        lines = [ln for ln in self.output.splitlines() if ln.strip()]
        return lines[-1].strip() if lines else "(no output)"

    def report_lines(self) -> list[str]:
        """The copy's path transitions, failover windows and summary line."""
        return [ln for ln in self.output.splitlines() if _REPORT.match(ln)]


@dataclass
class Copy:
    proc: subprocess.Popen[Any]
    log: Path
    started: float = field(default_factory=time.time)

    def outcome(self) -> Outcome:
        status = self.proc.wait()
        return Outcome(status, self.started, time.time() - self.started, self.log.read_text())


def start_copy(lab: Lab, argv: list[str], log: Path) -> Copy:
    """``reservoir copy ARGV`` in host src, its stdout and stderr into ``log``."""
    with open(log, "wb") as out:
        started = time.time()
        proc = lab.run("src", [*reservoir_command(), "copy", *argv], stdout=out, stderr=out)
    return Copy(proc, log, started)


def records(path: Path, kind: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    found = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in found if r.get("type") == kind]


def path_event(path: Path, net: Net, state: str, link: str, after: float) -> float | None:
    """Time of the first ``path`` record of ``link`` in ``state`` at or after ``after``."""
    times = [
        float(r["time"])
        for r in records(path, "path")
        if r["state"] == state and net.link_of(str(r["path"])) == link and r["time"] >= after
    ]
    return min(times) if times else None


def stream_lines(path: Path, net: Net) -> list[str]:
    """Per stream: its link, mean rate while it had data, cwnd and RTT medians, retransmits."""
    by_stream: dict[str, list[dict[str, Any]]] = {}
    for r in records(path, "stream"):
        by_stream.setdefault(str(r["stream"]), []).append(r)
    return [_stream_line(s, rs, net) for s, rs in sorted(by_stream.items())]


def _stream_line(stream: str, rs: list[dict[str, Any]], net: Net) -> str:
    busy = [r for r in rs if r.get("bytes")]
    seconds = sum(float(r["seconds"]) for r in busy)
    mbit = sum(int(r["bytes"]) for r in busy) * 8 / seconds / 1e6 if seconds else 0.0
    cwnd = [int(r["snd_cwnd"]) for r in busy if r.get("snd_cwnd")]
    rtt = [int(r["rtt"]) for r in busy if r.get("rtt")]
    retrans = sum(int(r.get("retransmits") or 0) for r in rs)
    cw = f"{statistics.median(cwnd) / 1e6:.2f}/{max(cwnd) / 1e6:.2f} MB" if cwnd else "n/a"
    rt = f"{statistics.median(rtt) / 1e3:.0f}/{max(rtt) / 1e3:.0f} ms" if rtt else "n/a"
    link = net.link_of(str(rs[0]["path"]))
    return (
        f"    stream {stream:>2} ({link if link in LINKS else 'url'}): {mbit:5.0f} Mbit/s"
        f" over {seconds:4.1f} s busy, cwnd median/max {cw}, rtt median/max {rt},"
        f" retransmits {retrans}"
    )
