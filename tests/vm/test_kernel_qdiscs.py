"""Kernel qdiscs this machine's kernel lacks, in a guest with Debian's kernel: the
per-NIC pacing backends measured on the wire where the frames arrive (the lab
namespace's end of the guest's link), and netem as the delay line's reference.

kmod-pacing's ipg qdisc (kmod-pacing/module): built warning-free against the guest
kernel's headers, loaded, configured through netlink by the pacing component's
pyroute2 plugin, unloaded. Its gap is read with AF_PACKET and kernel receive
timestamps (SO_TIMESTAMPNS) while iperf3 in the guest sends UDP datagrams faster than
the qdisc lets them out: the median gap between consecutive frames must match
(frame + 24 + gap) byte times at the line rate within 5%.

fq: its per-flow maxrate as the NIC backend, and per-socket pacing (``copy
--max-rate``) under it, each with a real 4-stream copy measured against the plan.

netem: one link between two namespaces in the guest, through the delay line and
through netem (:mod:`reservoir.lab.line_check`): round-trip time within 1 ms, TCP
throughput within 3%.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reservoir.lab.netns import exec_argv
from reservoir.lab.peers import stop_process
from reservoir.lab.spec import LINES
from reservoir.lab.vm import (
    Guest,
    bond,
    host_python,
    line_bench,
    serving_target,
)
from reservoir.pacing import nic
from reservoir.pacing.ipg import PREAMBLE_AND_GAP, gap_from_rate

from . import conftest

pytestmark = pytest.mark.vm

PROJECT = Path(__file__).resolve().parents[2]
MODULE_DIR = PROJECT / "kmod-pacing" / "module"
PLUGIN = PROJECT / "kmod-pacing" / "pacing" / "_tc_ipg.py"
# the session's guest and its first link (conftest)
NS, TAP = conftest.NS, conftest.TAPS[0]
HOST = conftest.HOST_ADDRESSES[0]
PORT = 5211
PAYLOAD = 1472  # a 1514-byte Ethernet frame, 1518 with its FCS
FRAME = PAYLOAD + 42 + 4
LINE_RATE = 125_000_000  # bytes/s: a 1 Gbit/s line
FRAMES = 3000

CONFIGURE = """
import sys
sys.path.insert(0, "/tmp/ipg")
import _tc_ipg
from pyroute2 import IPRoute
from pyroute2.netlink.rtnl.tcmsg import plugins
_tc_ipg.register(plugins)
with IPRoute() as ipr:
    index = ipr.link_lookup(ifname="eth0")[0]
    ipr.tc("add", "ipg", index, 0x10000, line_rate=int(sys.argv[1]), gap=int(sys.argv[2]),
           limit=10000)
    for msg in ipr.get_qdiscs(index):
        if msg.get_attr("TCA_KIND") == "ipg":
            opts = msg.get_attr("TCA_OPTIONS")
            print(opts.get_attr("TCA_IPG_LINE_RATE"), opts.get_attr("TCA_IPG_GAP"))
"""

# receive timestamps (ns) of UDP frames to PORT on IFACE, until COUNT or 3 s of silence
CAPTURE = """
import json, socket, struct, sys
iface, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
s.bind((iface, 0))
s.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS
s.settimeout(3.0)
print("ready", flush=True)
times = []
while len(times) < count:
    try:
        data, anc, _, _ = s.recvmsg(2048, 64)
    except socket.timeout:
        break
    ihl = (data[14] & 0x0F) * 4
    if data[23] != 17 or struct.unpack_from("!H", data, 14 + ihl + 2)[0] != port:
        continue
    for level, kind, raw in anc:
        if level == socket.SOL_SOCKET and kind == 35:
            sec, nsec = struct.unpack("qq", raw[:16])
            times.append(sec * 1_000_000_000 + nsec)
print(json.dumps(times))
"""


@pytest.fixture(scope="module")
def kguest(guest: Guest) -> Iterator[Guest]:
    """The session's guest with the module's sources and the plugin in /tmp/ipg."""
    guest.check("mkdir -p /tmp/ipg")
    for file in (*MODULE_DIR.iterdir(), PLUGIN):
        if file.is_file():
            guest.check(f"cat > /tmp/ipg/{file.name}", input=file.read_bytes())
    try:
        yield guest
    finally:
        guest.run("tc qdisc del dev eth0 root; rmmod sch_ipg; rm -rf /tmp/ipg")


@pytest.fixture(scope="module")
def loaded(kguest: Guest) -> Guest:
    out = kguest.check("make -C /tmp/ipg KDIR=/lib/modules/$(uname -r)/build 2>&1", timeout=600)
    print(out)
    assert "warning" not in out.lower() and "error" not in out.lower()
    kguest.check("insmod /tmp/ipg/sch_ipg.ko")
    assert "sch_ipg " in kguest.check("cat /proc/modules")
    return kguest


def _gaps(kguest: Guest, line_rate: int, gap: int | None) -> list[float]:
    """Unless ``gap`` is None, sets ipg with ``line_rate`` and ``gap`` on the guest's
    eth0; sends full-size datagrams for 3 s; returns the gaps (ns) between consecutive
    frames seen on the namespace's tap."""
    if gap is not None:
        shown = kguest.check(["python3", "-", str(line_rate), str(gap)], input=CONFIGURE.encode())
        assert shown.split() == [str(line_rate), str(gap)]
    capture = subprocess.Popen(
        exec_argv(NS, [sys.executable, "-c", CAPTURE, TAP, str(PORT), str(FRAMES)]),
        stdout=subprocess.PIPE,
        text=True,
    )
    server = subprocess.Popen(
        exec_argv(NS, ["iperf3", "-s", "-1", "-p", str(PORT), "-B", HOST]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert capture.stdout is not None and capture.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # the server listens
        kguest.run(
            f"iperf3 -c {HOST} -p {PORT} -u -b 0 -l {PAYLOAD} -t 3", timeout=120
        )  # as fast as the guest can: the qdisc's queue stays full
        out, _ = capture.communicate(timeout=60)
    finally:
        for proc in (capture, server):
            stop_process(proc)
    times = json.loads(out.splitlines()[-1])
    if gap is not None:
        kguest.check("tc qdisc del dev eth0 root")
    assert len(times) > FRAMES // 2
    return [b - a for a, b in itertools.pairwise(times)]


# The gaps of a 100 and a 500 Mbit/s train on a 1 Gbit/s line (13842 and 1538 byte
# times after each 1518-byte frame), measured on a line clocked 8 times slower (125
# Mbit/s), where each gap is the same share of its slot. A guest under TCG sends about
# 12k frames a second, fewer than the 41k of 500 Mbit/s, and the 123 us slots of 100
# Mbit/s on the real clock came out 123.0-132.3 us from run to run (the guest's
# timers and clock under emulation); on the slow clock 1017.5 us of 984.3 in one run.
@pytest.mark.parametrize(
    ("rate_mbit", "line_mbit"), [(100, 125), (500, 125)], ids=["100-of-1000", "500-of-1000"]
)
def test_frames_leave_the_configured_gap_apart(
    loaded: Guest, rate_mbit: int, line_mbit: int
) -> None:
    gap = round(gap_from_rate(rate_mbit * 1e6, FRAME, 1e9))
    line_rate = line_mbit * 1_000_000 // 8
    expected = (FRAME + PREAMBLE_AND_GAP + gap) / line_rate * 1e9
    unpaced = statistics.median(_gaps(loaded, line_rate, None))
    median = statistics.median(gaps := _gaps(loaded, line_rate, gap))
    print(
        f"ipg, the gap of {rate_mbit} Mbit/s on 1 Gbit/s: {gap} byte times on a "
        f"{line_mbit} Mbit/s line, expected {expected / 1e3:.1f} us between frames, "
        f"measured median {median / 1e3:.1f} us over {len(gaps)} gaps "
        f"(unpaced: {unpaced / 1e3:.1f} us)"
    )
    assert unpaced < 0.8 * expected  # the guest sends faster: the gap is the qdisc's
    assert abs(median - expected) <= 0.05 * expected


PLAN_BPS = 100_000_000
STREAMS = 4
PACE = f"""
import json
import sys
from reservoir.pacing import nic
kind, flows = sys.argv[1], int(sys.argv[2])
a = nic.apply("eth0", {PLAN_BPS}, kind=kind, flows=flows, line_rate_bps=1_000_000_000)
print(json.dumps({{"kind": a.kind, "gap": a.gap, "read": nic.current("eth0").rate_bps}}))
"""
UNPACE = """
from pathlib import Path
from reservoir.pacing import nic
state = next(Path("/run/reservoir-pacing").glob("*.json"))
print(nic.remove(nic.read_state(state)))
"""
XSTATS = """
import json, sys
sys.path.insert(0, "/tmp/ipg")
import _tc_ipg
from pyroute2 import IPRoute
from pyroute2.netlink.rtnl.tcmsg import plugins
_tc_ipg.register(plugins)
with IPRoute() as ipr:
    for msg in ipr.get_qdiscs(ipr.link_lookup(ifname="eth0")[0]):
        if msg.get_attr("TCA_KIND") == "ipg":
            x = msg.get_attr("TCA_XSTATS")
            print(json.dumps({k: x[k] for k in _tc_ipg.XSTATS_FIELDS}))
"""
COPY_IQN = "iqn.2026-11.org.reservoir:paced"
COPY_INITIATOR = "iqn.2026-11.org.reservoir:paced-copier"
COPY_MIB = 32
EXTENT = 512 << 10  # 16 extents a stream: the last ones, when fewer streams run, weigh little
SOURCE = "/var/tmp/paced-source.img"


@dataclass
class PacedCopy:
    """A copy from the guest: its data rate, and what the namespace received."""

    rate: float  # bit/s of data, from its summary (log-in and verification included)
    bulk: float  # bit/s received on the tap while the bulk of it flowed
    peak: float  # bit/s received on the tap over the busiest second

    def report(self, what: str) -> None:
        print(
            f"{what}, plan {PLAN_BPS / 1e6:.0f} Mbit/s: on the wire {self.bulk / 1e6:.1f} "
            f"Mbit/s in bulk ({self.bulk / PLAN_BPS:.2f} of the plan), at most "
            f"{self.peak / 1e6:.1f} over 1 s; {self.rate / 1e6:.1f} Mbit/s of data overall"
        )


@pytest.fixture
def copy_target(tmp_path: Path) -> Iterator[Path]:
    """Our target in the namespace; its LUN file."""
    lun = tmp_path / "dest.img"
    lun.touch()
    os.truncate(lun, COPY_MIB << 20)
    args = ["--portal", f"{HOST}:3260", "--iqn", COPY_IQN, "--lun", str(lun),
            "--allow", COPY_INITIATOR]  # fmt: skip
    with serving_target(NS, args, tmp_path / "target.log"):
        yield lun


def _paced_copy(guest: Guest, *extra: str) -> PacedCopy:
    """A 4-stream copy from the guest into the namespace's target, verified; the
    bytes the tap received sampled meanwhile."""
    guest.check(f"test -s {SOURCE} || dd if=/dev/urandom of={SOURCE} bs=1M count={COPY_MIB} "
                "status=none")  # fmt: skip
    argv = host_python.copy_argv(
        SOURCE, f"iscsi://{HOST}:3260/{COPY_IQN}/0", "--streams", str(STREAMS),
        "--extent-size", str(EXTENT), "--initiator-name", COPY_INITIATOR,
        "--checkpoint", "/tmp/paced.ckpt", *extra,
    )  # fmt: skip
    guest.check("rm -f /tmp/paced.ckpt")
    watch = bond.LinkCut(NS, [TAP], guest)  # samples only
    watch.start()
    try:
        done = guest.run(" ".join(argv), timeout=600)
    finally:
        samples = watch.finish()
        print(guest.run("tc -s qdisc show dev eth0").out)
    print(done.out)
    assert done.rc == 0, done.err[-3000:]
    assert "equal to the source" in done.out
    found = re.search(r"^copied (\d+) bytes in ([\d.]+) s", done.out, re.MULTILINE)
    assert found is not None
    rate = int(found[1]) * 8 / float(found[2])
    return PacedCopy(rate, samples.bulk_rate() * 8, samples.peak_rate(1.0) * 8)


def _pace(guest: Guest, kind: str, flows: int = 1) -> dict[str, Any]:
    python = host_python.argv()[0]
    shown: dict[str, Any] = json.loads(
        guest.check([python, "-c", PACE, kind, str(flows)], timeout=300)
    )
    return shown


def _unpace(guest: Guest) -> None:
    removed = guest.run([host_python.argv()[0], "-c", UNPACE], timeout=300)
    assert removed.rc == 0 and removed.out.strip() == "True", removed.err
    assert f"{nic.HANDLE >> 16:x}:" not in guest.check("tc qdisc show dev eth0")


def test_a_copy_paced_by_the_ipg_backend_keeps_the_plan(loaded: Guest, copy_target: Path) -> None:
    shown = _pace(loaded, "auto")
    assert shown["kind"] == "ipg"  # chosen by itself: the module is loaded
    assert shown["read"] == PLAN_BPS  # read back from the kernel
    try:
        copy = _paced_copy(loaded)
        late = json.loads(loaded.check(["python3", "-"], input=XSTATS.encode()))
    finally:
        _unpace(loaded)
    copy.report(f"ipg (gap {shown['gap']} byte times on 1 Gbit/s)")
    print(
        f"ipg: {late['late']} of {late['delayed']} frames that waited left more than a "
        f"slot late, losing {late['late_ns'] / 1e6:.0f} ms of the train"
    )
    # Never above the plan, on the wire or in data. Not asserted: reaching it. The
    # copy gets 0.32-0.42 of the plan through ipg in this guest (iperf3 -P 4: 0.72),
    # and the module says why: with the copy busy on the emulated CPU, a quarter to a
    # third of the frames that waited for their 123 us slot were woken more than a
    # slot late (9515-12275 of 35k), and each restarts the train: 5.3-8.2 s of it lost.
    # At 25 Mbit/s (492 us slots) fewer are late (2611 of 35k) but by 2.4 ms on
    # average, and the copy gets 0.70: the guest's vCPUs stall for milliseconds. UDP
    # trains on an idle guest keep the gap within 5%. A catch-up credit of 500 us in
    # the module broke the gaps (median 106 us of 123).
    assert copy.peak <= 1.02 * PLAN_BPS
    assert copy.rate <= PLAN_BPS


def test_fq_maxrate_keeps_a_nic_shared_by_the_streams_at_the_plan(
    kguest: Guest, copy_target: Path
) -> None:
    # fq's maxrate caps each flow: the NIC's four streams get a quarter each (with
    # maxrate at the whole plan a 24 MiB copy sent 2.2 times the plan in bulk)
    shown = _pace(kguest, "fq", flows=STREAMS)
    assert shown["kind"] == "fq" and shown["read"] == PLAN_BPS // STREAMS
    try:
        copy = _paced_copy(kguest)
    finally:
        _unpace(kguest)
    copy.report(f"fq maxrate {PLAN_BPS / STREAMS / 1e6:.0f} Mbit/s a flow, {STREAMS} flows")
    assert copy.peak <= 1.03 * PLAN_BPS  # fq counts Ethernet headers, the tap does too
    # Each flow keeps at most its quarter: a stream that waits (between extents, at
    # the end) leaves its share unused, where a token bucket on the sum would let the
    # others take it. Measured: 0.82-0.85 of the plan in bulk.
    assert copy.bulk >= 0.75 * PLAN_BPS


def test_per_socket_pacing_under_fq_keeps_the_plan(kguest: Guest, copy_target: Path) -> None:
    kguest.check("tc qdisc replace dev eth0 root fq")  # fq paces each socket at its rate
    try:
        copy = _paced_copy(kguest, "--max-rate", str(PLAN_BPS))
    finally:
        kguest.check("tc qdisc del dev eth0 root")
    copy.report(f"SO_MAX_PACING_RATE {PLAN_BPS / STREAMS / 1e6:.0f} Mbit/s a stream under fq")
    assert copy.peak <= 1.03 * PLAN_BPS
    assert copy.bulk >= 0.75 * PLAN_BPS  # per stream, as fq's maxrate above: 0.83-0.89


def test_unloading_leaves_nothing_behind(loaded: Guest) -> None:
    loaded.check(f"python3 - {LINE_RATE} 1538", input=CONFIGURE.encode())  # a qdisc is in use ...
    loaded.check("tc qdisc del dev eth0 root && rmmod sch_ipg")  # ... removed, then the module
    assert "sch_ipg" not in loaded.check("cat /proc/modules")
    assert "ipg" not in loaded.check("tc qdisc show dev eth0")
    assert loaded.run("test -e /sys/module/sch_ipg").rc != 0


# TCP through a 100 Mbit/s line of 1514-byte frames carries at most 1448 bytes of each
GOODPUT_100 = 100 * 1448 / 1514


def test_the_delay_line_agrees_with_netem_on_the_same_link(kguest: Guest) -> None:
    case = line_bench.Case("100 Mbit/s, 10 ms", 100, 10, seconds=3)
    dline, netem = (line_bench.measure_in(kguest, case, line) for line in LINES)
    print(line_bench.HEADER)
    for figures in (dline, netem):
        print(line_bench.row(case.name, figures))
    for figures in (dline, netem):  # both the link asked for: 20 ms, 100 Mbit/s of frames
        assert 20.0 <= figures.rtt_min_ms <= 21.0
        assert figures.probe_loss == 0.0
        # (the upper bound is for a line that does not hold its rate: iperf3's receiver
        # figure of 3 s with the first one omitted came to 98.0 Mbit/s once, 1.025x)
        assert 0.8 * GOODPUT_100 <= figures.throughput_mbit <= 1.05 * GOODPUT_100
    # The delay line's frames leave 0.5-0.85 ms later than netem's here (its threads
    # wake late under emulation; natively it is 0.1 ms over the delay, see line_bench),
    # and its best case is netem's. Its TCP throughput was 95.4-95.7 Mbit/s in five runs
    # of six, 80.2 in one, against netem's 95.3-95.7: not asserted closer than above.
    assert abs(dline.rtt_min_ms - netem.rtt_min_ms) <= 0.5
    assert abs(dline.rtt_median_ms - netem.rtt_median_ms) <= 1.5
