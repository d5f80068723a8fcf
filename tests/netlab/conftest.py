"""Fixtures for lab tests: labs that are always taken down, probes run inside hosts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from reservoir.lab import netns
from reservoir.lab.network import Lab
from reservoir.lab.spec import Spec, parse

# A UDP echo server (argv: server ADDR PORT) and client (argv: client ADDR PORT N),
# the client printing the round-trip times in ms of the answers it got as JSON.
ECHO = """
import json, socket, sys, time
mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if mode == "server":
    s.bind((addr, port))
    while True:
        data, peer = s.recvfrom(2048)
        s.sendto(data, peer)
s.settimeout(0.5)
rtts = []
for i in range(int(sys.argv[4])):
    t = time.monotonic()
    try:
        s.sendto(b"%d" % i, (addr, port))
        while s.recvfrom(2048)[0] != b"%d" % i:
            pass
        rtts.append((time.monotonic() - t) * 1000)
    except OSError:  # a timeout, or no route while the link is down
        pass
    time.sleep(0.02)
print(json.dumps(rtts))
"""
ECHO_PORT = 7777


def need_lab() -> None:
    reason = netns.can_create()
    if reason is not None:
        pytest.skip(f"cannot create network namespaces here: {reason}")
    for tool in ("ip", "tc", "sysctl", "iperf3", "cc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (run make install)")


def one_link_spec(**link: float) -> Spec:
    return parse(
        {
            "host": [{"name": "a"}, {"name": "b"}],
            "link": [
                {
                    "name": "l1",
                    "a": "a",
                    "b": "b",
                    "a_addr": "10.201.1.1/24",
                    "b_addr": "10.201.1.2/24",
                    **link,
                }
            ],
        }
    )


def lab_of(spec: Spec) -> Iterator[Lab]:
    need_lab()
    with Lab(spec) as lab:
        yield lab
    assert not [ns for ns in netns.names() if ns.startswith(lab.prefix)]


def rtts(lab: Lab, src: str, dst_host: str, dst_addr: str, count: int) -> list[float]:
    """Round-trip times (ms) of ``count`` UDP echoes from ``src`` to ``dst_addr``."""
    server = lab.run(dst_host, [sys.executable, "-c", ECHO, "server", dst_addr, str(ECHO_PORT)])
    try:
        time.sleep(0.2)
        argv = [sys.executable, "-c", ECHO, "client", dst_addr, str(ECHO_PORT), str(count)]
        out = lab.exec(src, argv, timeout=30).stdout
        result: list[float] = json.loads(out)
        return result
    finally:
        server.kill()
        server.wait()


def iperf_mbit(lab: Lab, src: str, dst_host: str, dst_addr: str, seconds: int) -> float:
    """Receiver throughput (Mbit/s) of one iperf3 TCP stream, the first second omitted."""
    server = lab.run(
        dst_host,
        ["iperf3", "-s", "-1", "-B", dst_addr],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.3)
        argv = ["iperf3", "-J", "-c", dst_addr, "-t", str(seconds), "-O", "1"]
        out = lab.exec(src, argv, timeout=seconds + 30).stdout
        bps: float = json.loads(out)["end"]["sum_received"]["bits_per_second"]
        return bps / 1e6
    finally:
        server.wait(10)


def goodput_mbit(rate_mbit: float, mtu: int = 1500) -> float:
    """TCP payload rate of a link of ``rate_mbit`` counted in Ethernet frames
    (IPv4 + TCP with timestamps: 52 header bytes; Ethernet: 14)."""
    return rate_mbit * (mtu - 52) / (mtu + 14)
