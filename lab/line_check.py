"""What a lab line does, measured between the two ends of one link: round-trip time,
jitter and loss of ICMP echoes timed by the kernel, and TCP throughput (iperf3). The
same link is built with the delay line or with netem (``line``), so the two can be
compared on one kernel (netem only where the kernel has sch_netem: in the VM lab's
guests)::

    python -m reservoir.lab.line_check --line netem --rate-mbit 100 --delay-ms 10

prints one JSON object: the link as asked and the figures measured.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from reservoir.lab import netns
from reservoir.lab.network import MID_A, MID_B, Lab, line_stats
from reservoir.lab.peers import stop_process
from reservoir.lab.spec import LINES, Spec, parse

__all__ = ["LineFigures", "icmp_rtts", "main", "measure", "spec_for"]

A, B = "10.95.0.1", "10.95.0.2"
IPERF_PORT = 5207

# ICMP echoes (argv: DEV ADDR COUNT GAP_S WAIT_S), one every GAP_S, answered by the
# far host's kernel; each RTT is taken between the kernel's timestamps of the request
# leaving DEV and of the answer arriving on it (an AF_PACKET tap with SO_TIMESTAMPNS),
# so neither end's process scheduling is in it: only the path (and the far kernel).
# Prints each echo's RTT (ms), or null where no answer came, as JSON.
ICMP_PROBE = """
import json, os, select, socket, struct, sys, time
dev, dst, count, gap, wait = sys.argv[1], sys.argv[2], int(sys.argv[3]), *map(float, sys.argv[4:6])
SO_TIMESTAMPNS, ETH_P_ALL, ETH_P_IP, PACKET_OUTGOING = 35, 0x0003, 0x0800, 4
tap = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
tap.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
tap.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE: a slow reader misses none
tap.bind((dev, ETH_P_ALL))
icmp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
ident = os.getpid() & 0xFFFF
sent, back = {}, {}

def checksum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xFFFF)
    return ~(s + (s >> 16)) & 0xFFFF

def drain(until):
    while (left := until - time.monotonic()) > 0 and len(back) < count:
        if not select.select([tap], [], [], left)[0]:
            return
        data, anc, _, addr = tap.recvmsg(2048, 64)
        if addr[1] != ETH_P_IP or len(data) < 28 or data[9] != socket.IPPROTO_ICMP:
            continue
        ihl = (data[0] & 0xF) * 4
        kind, _, _, pid, seq = struct.unpack("!BBHHH", data[ihl : ihl + 8])
        stamps = [d for lvl, typ, d in anc if (lvl, typ) == (socket.SOL_SOCKET, SO_TIMESTAMPNS)]
        if pid != ident or not stamps:
            continue
        sec, nsec = struct.unpack("qq", stamps[0])
        if kind == 8 and addr[2] == PACKET_OUTGOING:
            sent[seq] = sec * 10**9 + nsec
        elif kind == 0 and addr[2] != PACKET_OUTGOING:
            back[seq] = sec * 10**9 + nsec

start = time.monotonic()
for seq in range(count):
    body = struct.pack("!BBHHH", 8, 0, 0, ident, seq) + b"reservoir probe."
    icmp.sendto(body[:2] + struct.pack("!H", checksum(body)) + body[4:], (dst, 0))
    drain(start + (seq + 1) * gap)
drain(time.monotonic() + wait)
rtts = [(back[s] - sent[s]) / 1e6 if s in sent and s in back else None for s in range(count)]
print(json.dumps(rtts))
"""


@dataclass(frozen=True)
class LineFigures:
    """One link measured: as asked, and as it behaved."""

    line: str
    rate_mbit: float
    delay_ms: float  # one way, as asked
    loss: float  # a frame's chance to be lost, one way, as asked
    jitter_us: float  # as asked: a uniform 0..jitter added to each frame's delay
    probes: int
    rtt_min_ms: float
    rtt_median_ms: float
    rtt_mean_ms: float
    rtt_p99_ms: float
    jitter_ms: float  # standard deviation of the round-trip times
    probe_loss: float  # share of echoes with no answer (lost either way)
    throughput_mbit: float  # TCP, one stream, what the receiver got; 0 if not measured
    retransmits: int  # of that stream
    line_drops: int  # frames the line dropped (its queue full, or --loss), both ways
    socket_drops: int  # frames the kernel dropped before dline read them (dline only)

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def spec_for(
    line: str, rate_mbit: float, delay_ms: float, loss: float = 0.0, jitter_us: float = 0.0
) -> Spec:
    """Two hosts, a and b, on one link through ``line``."""
    link: dict[str, Any] = {"name": "l0", "a": "a", "b": "b", "a_addr": f"{A}/24",
                            "b_addr": f"{B}/24", "rate_mbit": rate_mbit, "delay_ms": delay_ms,
                            "loss": loss, "jitter_us": jitter_us, "line": line}  # fmt: skip
    return parse({"host": [{"name": "a"}, {"name": "b"}], "link": [link]})


def measure(
    line: str,
    rate_mbit: float,
    delay_ms: float,
    loss: float = 0.0,
    jitter_us: float = 0.0,
    *,
    probes: int = 500,
    every: float = 0.004,
    seconds: float = 0.0,
) -> LineFigures:
    """Builds the link, sends ``probes`` probes ``every`` s apart, then (``seconds`` >
    0) runs iperf3 over it that long; takes it down again."""
    with Lab(spec_for(line, rate_mbit, delay_ms, loss, jitter_us)) as lab:
        rtts = icmp_rtts(lab, "a", "l0", B, probes, gap=every, wait=1.0 + 4 * delay_ms / 1000)
        mbit, retransmits = _throughput(lab, seconds) if seconds > 0 else (0.0, 0)
        netem_drops = _netem_drops(lab) if line == "netem" else 0
    dline = line_stats(lab.line_logs.get("l0", "")).values()
    line_drops = sum(d["drop_frames"] for d in dline)
    socket_drops = sum(d["socket_drops"] for d in dline)
    answered = [r for r in rtts if r is not None]
    if len(answered) < 2:
        raise SystemExit(f"line_check: {len(answered)} of {probes} probes came back")
    return LineFigures(
        line=line, rate_mbit=rate_mbit, delay_ms=delay_ms, loss=loss, jitter_us=jitter_us,
        probes=probes, rtt_min_ms=min(answered), rtt_median_ms=statistics.median(answered),
        rtt_mean_ms=statistics.fmean(answered),
        rtt_p99_ms=statistics.quantiles(answered, n=100)[98], jitter_ms=statistics.stdev(answered),
        probe_loss=1 - len(answered) / probes, throughput_mbit=mbit, retransmits=retransmits,
        line_drops=line_drops + netem_drops, socket_drops=socket_drops,
    )  # fmt: skip


def icmp_rtts(
    lab: Lab, host: str, dev: str, addr: str, count: int, *, gap: float = 0.02, wait: float = 0.5
) -> list[float | None]:
    """RTTs (ms; None: no answer) of ``count`` ICMP echoes from ``host`` to ``addr``
    over its link ``dev``, kernel-timestamped on ``dev`` (see ICMP_PROBE)."""
    argv = [sys.executable, "-c", ICMP_PROBE, dev, addr, str(count), str(gap), str(wait)]
    out = lab.exec(host, argv, timeout=count * gap + wait + 30).stdout
    result: list[float | None] = json.loads(out)
    return result


def _netem_drops(lab: Lab) -> int:
    """Packets the two netem qdiscs dropped (their ``tc -s`` counters)."""
    dropped = 0
    for side in (MID_A, MID_B):
        argv = netns.exec_argv(lab.mid_ns("l0"), ["tc", "-s", "qdisc", "show", "dev", side])
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        dropped += sum(int(n) for n in re.findall(r"\(dropped (\d+),", out))
    return dropped


def _throughput(lab: Lab, seconds: float) -> tuple[float, int]:
    server = lab.run("b", ["iperf3", "-s", "-1", "-B", B, "-p", str(IPERF_PORT)],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        time.sleep(0.5)  # it listens
        # the first second (slow start) omitted
        argv = ["iperf3", "-c", B, "-p", str(IPERF_PORT), "-t", f"{seconds:g}", "-O", "1", "-J"]
        out = lab.exec("a", argv, timeout=seconds + 60).stdout
    finally:
        stop_process(server)
    end = json.loads(out)["end"]
    return end["sum_received"]["bits_per_second"] / 1e6, int(end["sum_sent"]["retransmits"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m reservoir.lab.line_check", description=__doc__)
    p.add_argument("--line", choices=LINES, default="dline")
    p.add_argument("--rate-mbit", type=float, default=0.0)
    p.add_argument("--delay-ms", type=float, required=True)
    p.add_argument("--loss", type=float, default=0.0, help="0..1, each way")
    p.add_argument("--jitter-us", type=float, default=0.0)
    p.add_argument("--probes", type=int, default=500)
    p.add_argument("--every", type=float, default=0.004, help="s between probes")
    p.add_argument("--seconds", type=float, default=0.0, help="iperf3 for this long (0: none)")
    a = p.parse_args(argv)
    figures = measure(a.line, a.rate_mbit, a.delay_ms, a.loss, a.jitter_us,
                      probes=a.probes, every=a.every, seconds=a.seconds)  # fmt: skip
    print(figures.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
