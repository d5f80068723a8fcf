"""The ipg qdisc kernel module (kmod-pacing/module) in a guest with Debian's kernel:
built warning-free against the guest kernel's headers, loaded, configured through
netlink by the pacing component's pyroute2 plugin, measured on the wire, unloaded.

The gap is measured where the frames arrive: AF_PACKET with kernel receive
timestamps (SO_TIMESTAMPNS) on the lab namespace's end of the guest's link, while
iperf3 in the guest sends UDP datagrams faster than the qdisc lets them out. The median gap
between consecutive frames must match (frame + 24 + gap) byte times at the line
rate within 5%.
"""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.lab import netns
from reservoir.lab.netns import exec_argv
from reservoir.lab.peers import stop_process
from reservoir.lab.vm import Guest, GuestImage, add_tap
from reservoir.pacing.ipg import PREAMBLE_AND_GAP, gap_from_rate

from .conftest import PREFIX

pytestmark = pytest.mark.vm

PROJECT = Path(__file__).resolve().parents[2]
MODULE_DIR = PROJECT / "kmod-pacing" / "module"
PLUGIN = PROJECT / "kmod-pacing" / "pacing" / "_tc_ipg.py"
NS = "rsv-ipg"
TAP = "rsvipg0"
HOST, GUEST = "10.96.0.1", "10.96.0.2"
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
def kguest(image: GuestImage) -> Iterator[Guest]:
    netns.delete(NS)
    netns.add(NS)
    try:
        add_tap(NS, TAP, f"{HOST}/{PREFIX}")
        with Guest(image, "ipg", netns=NS, taps=[TAP]) as g:
            g.check(f"ip addr add {GUEST}/{PREFIX} dev eth0 && ip link set eth0 up")
            g.check("mkdir -p /tmp/ipg")
            for file in (*MODULE_DIR.iterdir(), PLUGIN):
                if file.is_file():
                    g.check(f"cat > /tmp/ipg/{file.name}", input=file.read_bytes())
            yield g
    finally:
        netns.delete(NS)


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
# times after each 1518-byte frame). A guest under TCG sends about 12k frames a
# second, fewer than the 41k of 500 Mbit/s: that gap is measured on a line clocked
# 8 times slower (125 Mbit/s), where it is the same share of each slot.
@pytest.mark.parametrize(
    ("rate_mbit", "line_mbit"), [(100, 1000), (500, 125)], ids=["100-of-1000", "500-of-1000"]
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


def test_unloading_leaves_nothing_behind(loaded: Guest) -> None:
    loaded.check(f"python3 - {LINE_RATE} 1538", input=CONFIGURE.encode())  # a qdisc is in use ...
    loaded.check("tc qdisc del dev eth0 root && rmmod sch_ipg")  # ... removed, then the module
    assert "sch_ipg" not in loaded.check("cat /proc/modules")
    assert "ipg" not in loaded.check("tc qdisc show dev eth0")
    assert loaded.run("test -e /sys/module/sch_ipg").rc != 0
