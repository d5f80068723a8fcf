"""Per-connection cwnd caps on a real TCP transfer between two lab namespaces (plain veth).

The sender socket is created in this process (a thread switched into host a's namespace
with setns), so the caps of this process cover it; the receiver is a sink in host b.
"""

from __future__ import annotations

import contextlib
import ctypes
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reservoir.agent.telemetry import sample
from reservoir.lab.network import Lab
from reservoir.pacing import MECHANISM_BPF, MECHANISM_PACING, CwndCaps

from .conftest import lab_of, one_link_spec

pytestmark = pytest.mark.integration

CAP = 20
DST, PORT = "10.201.1.2", 5201
CLONE_NEWNET = 0x40000000

SINK = """
import socket, sys, threading
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2])))
ls.listen()
def drain(c):
    while c.recv(1 << 20):
        pass
while True:
    threading.Thread(target=drain, args=(ls.accept()[0],), daemon=True).start()
"""


@contextlib.contextmanager
def in_netns(ns: str) -> Iterator[None]:
    """Switch the calling thread into namespace ``ns`` (and back): sockets created inside
    stay in it."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/thread-self/ns/net", "rb") as home, open(f"/run/netns/{ns}", "rb") as dst:
        if libc.setns(dst.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {ns}")
        try:
            yield
        finally:
            libc.setns(home.fileno(), CLONE_NEWNET)


@dataclass
class Flow:
    cwnds: list[int] = field(default_factory=list)
    rates: list[int] = field(default_factory=list)
    """Pacing rates applied (fallback), one per refresh."""
    acked: list[tuple[float, int]] = field(default_factory=list)
    mss: int = 0

    def goodput(self, skip: float) -> float:
        """Bytes/s acked after the first ``skip`` seconds."""
        start = next((t, b) for t, b in self.acked if t >= self.acked[0][0] + skip)
        end = self.acked[-1]
        return (end[1] - start[1]) / (end[0] - start[0])


def run_flow(lab: Lab, caps: CwndCaps | None, seconds: float, refresh: bool = False) -> Flow:
    """Push data to the sink for ``seconds``; cwnd sampled every 10 ms."""
    with in_netns(lab.ns("a")):
        sock = socket.socket()
    flow = Flow()
    stop = threading.Event()

    def push() -> None:
        buf = b"\0" * (1 << 18)
        with contextlib.suppress(OSError):
            while not stop.is_set():
                sock.sendall(buf)

    with sock:
        sock.settimeout(10)
        sock.connect((DST, PORT))
        if caps is not None:
            caps.set(sock, CAP)
        pusher = threading.Thread(target=push)
        pusher.start()
        try:
            t0 = last_refresh = time.monotonic()
            while (now := time.monotonic()) < t0 + seconds:
                info = sample(sock)
                flow.cwnds.append(info.snd_cwnd or 0)
                flow.acked.append((now, info.bytes_acked or 0))
                flow.mss = info.snd_mss or 0
                if caps is not None and refresh and now - last_refresh >= 0.1:
                    flow.rates.append(caps.refresh(sock) or 0)
                    last_refresh = now
                time.sleep(0.01)
        finally:
            stop.set()
            sock.shutdown(socket.SHUT_RDWR)
            pusher.join()
    return flow


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    for lab in lab_of(one_link_spec()):
        sink = lab.run("b", [sys.executable, "-c", SINK, DST, str(PORT)])
        try:
            time.sleep(0.3)
            yield lab
        finally:
            sink.kill()
            sink.wait()


@pytest.fixture
def bpf_caps() -> Iterator[CwndCaps]:
    caps = CwndCaps.open()
    cgroup = caps.cgroup
    try:
        if caps.mechanism != MECHANISM_BPF:
            pytest.skip(f"BPF cwnd clamp not available here: {caps.why_not_bpf}")
        yield caps
    finally:
        caps.close()
    assert cgroup is not None
    assert not cgroup.exists()
    assert "/run/reservoir/bpffs-" not in Path("/proc/self/mountinfo").read_text()


def test_uncapped_flow_grows_cwnd_above_cap(lab: Lab) -> None:
    flow = run_flow(lab, None, 1.0)
    got = flow.goodput(skip=0.3)
    print(f"uncapped: cwnd max {max(flow.cwnds)}, {got / 1e6:.1f} MB/s")
    assert max(flow.cwnds) > CAP, flow.cwnds


def test_bpf_clamp_keeps_cwnd_at_or_below_cap(lab: Lab, bpf_caps: CwndCaps) -> None:
    flow = run_flow(lab, bpf_caps, 1.0)
    print(f"bpf: cwnd max {max(flow.cwnds)} (cap {CAP}), {len(flow.cwnds)} samples")
    assert max(flow.cwnds) <= CAP, flow.cwnds
    assert max(flow.cwnds) >= CAP // 2  # the flow did grow up to the cap


def test_pacing_fallback_holds_rate_near_cap_over_srtt(lab: Lab) -> None:
    with CwndCaps.open(use_bpf=False) as caps:
        assert caps.mechanism == MECHANISM_PACING
        flow = run_flow(lab, caps, 1.5, refresh=True)
    rate = sum(flow.rates) / len(flow.rates)
    got = flow.goodput(skip=0.3)
    print(f"pacing: {got / 1e6:.1f} MB/s for {rate / 1e6:.1f} MB/s, cwnd max {max(flow.cwnds)}")
    assert 0.5 * rate <= got <= 1.15 * rate
