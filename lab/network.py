"""A lab network: hosts as network namespaces, links as veth pairs, shaped.

A link with ``delay_ms == 0`` is one veth pair between its two hosts, rate
limited with TBF on both ends. A link with a delay goes through a middle
namespace running the delay line ``dline`` (which also does the rate limit,
before the delay, and the loss), or, with ``line = "netem"`` where the kernel has
sch_netem, bridging its two sides with netem doing the same on each side's way
out (:func:`netem_args`). A host with ``forward`` is a router (IP
forwarding on, reverse-path filtering off); a host's extra ``addrs`` go on its
loopback, and the spec's routes are added once every link is up::

    with Lab(spec) as lab:          # up() on enter, down() on exit (and atexit)
        lab.exec("a", ["iperf3", "-c", "10.201.1.2"])
        lab.link_down("l1")

Every namespace is named with a per-run prefix, so :meth:`Lab.down` removes
exactly what :meth:`Lab.up` created; the state (namespaces, delay line PIDs)
can be saved to a file so another process can take the lab down.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from reservoir.lab import delayline, netns
from reservoir.lab.errors import LabError
from reservoir.lab.spec import Host, Link, Spec

RUN_ROOT = Path("/run/reservoir-lab")
TCP_MEM_MAX = 512 << 20
MID_A, MID_B = "side_a", "side_b"


@dataclass
class LineProc:
    """A delay line process: its PID and start time (so a reused PID is never hit)."""

    pid: int
    start: int


@dataclass
class LabState:
    prefix: str
    namespaces: list[str] = field(default_factory=list)
    lines: dict[str, LineProc] = field(default_factory=dict)

    def to_json(self) -> str:
        lines = {k: {"pid": v.pid, "start": v.start} for k, v in self.lines.items()}
        return json.dumps({"prefix": self.prefix, "namespaces": self.namespaces, "lines": lines})

    @classmethod
    def from_json(cls, text: str) -> LabState:
        d = json.loads(text)
        lines = {k: LineProc(int(v["pid"]), int(v["start"])) for k, v in d["lines"].items()}
        return cls(str(d["prefix"]), [str(n) for n in d["namespaces"]], lines)


def proc_start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def tbf_args(link: Link) -> list[str]:
    """``tc qdisc add`` arguments for TBF at the link's rate: a burst of at least an
    MTU (or 1 ms at the rate), a queue of ``queue_bytes`` (default 10 ms, >= 256 KiB)."""
    rate_bytes = link.rate_mbit * 1e6 / 8
    burst = max(link.mtu + 14, int(rate_bytes / 1000))
    limit = link.queue_bytes or max(256 << 10, int(rate_bytes / 100))
    return ["tbf", "rate", f"{link.rate_mbit:g}mbit", "burst", str(burst), "limit", str(limit)]


def dline_args(link: Link) -> list[str]:
    args = ["--a", MID_A, "--b", MID_B, "--delay-ms", f"{link.delay_ms:g}"]
    if link.rate_mbit > 0:
        args += ["--rate-mbit", f"{link.rate_mbit:g}"]
    if link.loss > 0:
        args += ["--loss", f"{link.loss:g}"]
    if link.queue_bytes > 0:
        args += ["--queue-bytes", str(link.queue_bytes)]
    if link.jitter_us > 0:
        args += ["--jitter-us", f"{link.jitter_us:g}"]
    return args


STATS = "dline: stats "


def line_stats(log: str) -> dict[str, dict[str, int]]:
    """The counters of a delay line's last whole stats line (at exit, or at
    :meth:`Lab.line_counters`) by direction (``a->b``, ``b->a``): ``fwd_frames``,
    ``drop_frames``, ``socket_drops``, ``late_frames`` (since the start) and
    ``max_late_us`` (the latest of them since the stats line before)...; empty
    before the first."""
    lines = [line for line in log.split("\n")[:-1] if line.startswith(STATS)]
    if not lines:
        return {}
    stats: dict[str, dict[str, int]] = {}
    for part in lines[-1].removeprefix(STATS).split(";"):
        direction, *pairs = part.split()
        stats[direction] = {k: int(v) for k, v in (kv.split("=") for kv in pairs)}
    return stats


def netem_args(link: Link) -> list[str]:
    """``tc qdisc add`` arguments for netem doing what dline does one way: the rate,
    the delay plus a uniform 0..jitter (netem's ``delay MU SIGMA`` is uniform in
    MU +- SIGMA, and with a rate it keeps the order), the loss. Its ``limit`` counts
    packets, the ones in flight too: what the delay holds at the rate plus the
    queue, counted in full frames (without a rate: 100000)."""
    jitter_ms = link.jitter_us / 1000
    args = ["netem", "delay", f"{link.delay_ms + jitter_ms / 2:g}ms"]
    if jitter_ms > 0:
        args.append(f"{jitter_ms / 2:g}ms")
    if link.rate_mbit > 0:
        rate_bytes = link.rate_mbit * 1e6 / 8
        queue = link.queue_bytes or max(256 << 10, int(rate_bytes * 2 * link.delay_ms / 1000))
        held = rate_bytes * (link.delay_ms + jitter_ms) / 1000 + queue
        limit = max(1000, math.ceil(held / (link.mtu + 14)))
        args += ["rate", f"{link.rate_mbit:g}mbit"]
    else:
        limit = 100_000
    if link.loss > 0:
        args += ["loss", f"{link.loss * 100:g}%"]
    return [*args, "limit", str(limit)]


class Lab:
    """The namespaces, links and delay lines of one spec, for one run."""

    def __init__(self, spec: Spec, state: LabState | None = None) -> None:
        self.spec = spec
        self.state = state or LabState(prefix=f"rsv{secrets.token_hex(3)}")
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.line_logs: dict[str, str] = {}
        """The delay lines' logs (with their stats lines) once :meth:`down` stopped them."""

    @property
    def prefix(self) -> str:
        return self.state.prefix

    @property
    def run_dir(self) -> Path:
        return RUN_ROOT / self.prefix

    def ns(self, host: str) -> str:
        """The namespace of a host."""
        if host not in {h.name for h in self.spec.hosts}:
            raise LabError(f"no host named {host!r} in the spec")
        return f"{self.prefix}-{host}"

    def mid_ns(self, link: str) -> str:
        return f"{self.prefix}-mid-{link}"

    # ------------------------------------------------------------ up / down

    def up(self) -> Lab:
        atexit.register(self.down)
        try:
            needs_dline = any(lk.delayed and lk.line == "dline" for lk in self.spec.links)
            dline = delayline.build() if needs_dline else None
            for host in self.spec.hosts:
                self._add_ns(self.ns(host.name), host=True)
                self._setup_host(host)
            for link in self.spec.links:
                if link.delayed:
                    self._add_delayed(link, dline)
                else:
                    self._add_direct(link)
            for route in self.spec.routes:
                what = f"ip route add {route.to} via {route.via} in {route.host}"
                netns.ns_run(self.ns(route.host), ["ip", *route.ip_args()], what)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Stop the delay lines and delete the namespaces this lab created. Idempotent."""
        errors: list[str] = []
        for name, line in list(self.state.lines.items()):
            self._stop_line(name, line)
            self.line_logs[name] = self.line_log_text(name)
            del self.state.lines[name]
        for ns in reversed(self.state.namespaces):
            try:
                netns.delete(ns)
            except LabError as e:
                errors.append(str(e))
        self.state.namespaces = [ns for ns in self.state.namespaces if netns.exists(ns)]
        shutil.rmtree(self.run_dir, ignore_errors=True)
        atexit.unregister(self.down)
        if errors:
            raise LabError("; ".join(errors))

    def __enter__(self) -> Lab:
        return self.up()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.down()

    # ------------------------------------------------------------ links

    def link_down(self, name: str) -> None:
        """Cut a link: its veths in both hosts go down."""
        self._set_link(name, "down")

    def link_up(self, name: str) -> None:
        """Restore a link cut with :meth:`link_down`."""
        self._set_link(name, "up")

    def _set_link(self, name: str, updown: str) -> None:
        link = self.spec.link(name)
        for host in (link.a, link.b):
            netns.ns_run(self.ns(host), ["ip", "link", "set", "dev", name, updown])

    # ------------------------------------------------------------ processes

    def run(self, host: str, argv: list[str], **popen_kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside the host's namespace; the caller owns the process."""
        return subprocess.Popen(netns.exec_argv(self.ns(host), argv), **popen_kw)

    def exec(
        self, host: str, argv: list[str], timeout: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the host's namespace and wait; LabError if it fails."""
        cmd = netns.exec_argv(self.ns(host), argv)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise LabError(f"{argv[0]} in {host} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    # ------------------------------------------------------------ building

    def _add_ns(self, ns: str, host: bool) -> None:
        if netns.exists(ns):
            raise LabError(f"namespace {ns} already exists (not created by this lab)")
        self.state.namespaces.append(ns)
        netns.add(ns)
        if host:
            netns.sysctl(ns, "net.ipv4.tcp_rmem", f"4096 131072 {TCP_MEM_MAX}")
            netns.sysctl(ns, "net.ipv4.tcp_wmem", f"4096 16384 {TCP_MEM_MAX}")
            # an idle connection keeps its window (the agents' warm sessions), as
            # the lfn-* tuning profiles set it on real hosts
            netns.sysctl(ns, "net.ipv4.tcp_slow_start_after_idle", "0")
        else:
            netns.sysctl(ns, "net.ipv6.conf.all.disable_ipv6", "1")
            netns.sysctl(ns, "net.ipv6.conf.default.disable_ipv6", "1")

    def _setup_host(self, host: Host) -> None:
        ns = self.ns(host.name)
        if host.forward:
            netns.sysctl(ns, "net.ipv4.ip_forward", "1")
            netns.sysctl(ns, "net.ipv6.conf.all.forwarding", "1")
            # a router sees asymmetric paths: a strict reverse-path filter would drop them
            # (the effective value is the larger of "all" and the device's, which the
            # links made later take from "default")
            netns.sysctl(ns, "net.ipv4.conf.all.rp_filter", "0")
            netns.sysctl(ns, "net.ipv4.conf.default.rp_filter", "0")
        for addr in host.addrs:
            netns.ns_run(ns, ["ip", "addr", "add", str(addr), "dev", "lo"], f"ip addr add {addr}")

    def _veth(self, ns1: str, name1: str, ns2: str, name2: str) -> None:
        peer = ["peer", "name", name2, "netns", ns2]
        # "name"/"dev" spelled out: a link may be called like an ip keyword (e.g. "b")
        cmd = ["ip", "link", "add", "name", name1, "netns", ns1, "type", "veth", *peer]
        netns.run(cmd, f"ip link add (veth {ns1}/{name1} - {ns2}/{name2})")

    def _host_end(self, link: Link, host: str, addr: str, shape: bool) -> None:
        ns = self.ns(host)
        netns.ns_run(ns, ["ip", "link", "set", "dev", link.name, "mtu", str(link.mtu), "up"])
        netns.ns_run(ns, ["ip", "addr", "add", addr, "dev", link.name], "ip addr add")
        if shape:
            tc = ["tc", "qdisc", "add", "dev", link.name, "root", *tbf_args(link)]
            netns.ns_run(ns, tc, f"tc qdisc add tbf on {link.name} in {ns}")

    def _add_direct(self, link: Link) -> None:
        self._veth(self.ns(link.a), link.name, self.ns(link.b), link.name)
        shape = link.rate_mbit > 0
        self._host_end(link, link.a, str(link.a_addr), shape)
        self._host_end(link, link.b, str(link.b_addr), shape)

    def _add_delayed(self, link: Link, dline: Path | None) -> None:
        mid = self.mid_ns(link.name)
        self._add_ns(mid, host=False)
        self._veth(self.ns(link.a), link.name, mid, MID_A)
        self._veth(self.ns(link.b), link.name, mid, MID_B)
        for side in (MID_A, MID_B):
            netns.ns_run(mid, ["ip", "link", "set", "dev", side, "mtu", str(link.mtu), "up"])
        self._host_end(link, link.a, str(link.a_addr), shape=False)
        self._host_end(link, link.b, str(link.b_addr), shape=False)
        if link.line == "netem":
            self._add_netem(link, mid)
        else:
            assert dline is not None
            self._start_line(link, mid, dline)

    def _add_netem(self, link: Link, mid: str) -> None:
        """The middle namespace bridges the two sides; netem on each one's way out."""
        netns.ns_run(mid, ["ip", "link", "add", "name", "br0", "type", "bridge"], "add bridge")
        for side in (MID_A, MID_B):
            netns.ns_run(mid, ["ip", "link", "set", "dev", side, "master", "br0"], "bridge port")
            tc = ["tc", "qdisc", "add", "dev", side, "root", *netem_args(link)]
            netns.ns_run(mid, tc, f"tc qdisc add netem on {side} of link {link.name}")
        netns.ns_run(mid, ["ip", "link", "set", "dev", "br0", "up"], "bridge up")

    # ------------------------------------------------------------ delay lines

    def line_log(self, link: str) -> Path:
        return self.run_dir / f"dline-{link}.log"

    def _start_line(self, link: Link, mid: str, dline: Path) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.line_log(link.name)
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                netns.exec_argv(mid, [str(dline), *dline_args(link)]),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        start = proc_start_time(proc.pid)
        if start is not None:
            self._procs[link.name] = proc
            self.state.lines[link.name] = LineProc(proc.pid, start)
        deadline = time.monotonic() + 10
        while b"dline: ready" not in log_path.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                text = log_path.read_text(errors="replace").strip()
                raise LabError(f"dline for link {link.name} did not start: {text}")
            time.sleep(0.01)

    def line_counters(self, link: str, timeout: float = 2.0) -> dict[str, dict[str, int]]:
        """The counters of ``link``'s delay line so far (see :func:`line_stats`), asked
        with SIGUSR1 (it prints them and runs on); empty where no delay line runs.
        The frames it released late say the lab itself fell behind meanwhile."""
        proc = self._procs.get(link)
        if proc is None or proc.poll() is not None:
            return {}
        path = self.line_log(link)
        before = path.read_text(errors="replace").count(STATS)
        proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = path.read_text(errors="replace")
            if text.count(STATS) > before and text.endswith("\n"):
                return line_stats(text)
            time.sleep(0.01)
        raise LabError(f"the delay line of link {link} printed no counters in {timeout:g} s")

    def _stop_line(self, name: str, line: LineProc) -> None:
        proc = self._procs.pop(name, None)
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return
        if proc_start_time(line.pid) != line.start:
            return  # gone, or the PID now belongs to someone else
        os.kill(line.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while proc_start_time(line.pid) == line.start:
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(line.pid, signal.SIGKILL)
            time.sleep(0.02)

    def line_log_text(self, link: str) -> str:
        """The delay line's log so far (its stats line once it stopped)."""
        path = self.line_log(link)
        return path.read_text(errors="replace") if path.exists() else ""
