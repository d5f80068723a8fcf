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
import os
import re
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
from reservoir.lab.vm import Guest, GuestImage, add_tap, bond, host_python, serving_target
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
        with Guest(image, "ipg", netns=NS, taps=[TAP], shares=host_python.shares()) as g:
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
PACE = f"""
import json
import os
import re
from reservoir.pacing import nic
a = nic.apply("eth0", {PLAN_BPS}, line_rate_bps=1_000_000_000)
print(json.dumps({{"kind": a.kind, "gap": a.gap, "read": nic.current("eth0").rate_bps}}))
"""
UNPACE = """
from pathlib import Path
from reservoir.pacing import nic
state = next(Path("/run/reservoir-pacing").glob("*.json"))
print(nic.remove(nic.read_state(state)))
"""
COPY_IQN = "iqn.2026-11.org.reservoir:paced"
COPY_INITIATOR = "iqn.2026-11.org.reservoir:paced-copier"
COPY_MIB = 24


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


def test_a_copy_paced_by_the_ipg_backend_keeps_the_plan(loaded: Guest, copy_target: Path) -> None:
    python = host_python.argv()[0]
    source = "/var/tmp/paced-source.img"
    loaded.check(f"dd if=/dev/urandom of={source} bs=1M count={COPY_MIB} status=none")
    shown = json.loads(loaded.check([python, "-c", PACE], timeout=300))
    assert shown["kind"] == "ipg"  # chosen by itself: the module is loaded
    assert shown["read"] == PLAN_BPS  # read back from the kernel
    argv = host_python.argv(
        "copy", source, f"iscsi://{HOST}:3260/{COPY_IQN}/0", "--streams", "4",
        "--extent-size", str(1 << 20), "--initiator-name", COPY_INITIATOR,
        "--checkpoint", "/tmp/paced.ckpt",
    )  # fmt: skip
    watch = bond.LinkCut(NS, [TAP], loaded)  # samples only
    watch.start()
    try:
        done = loaded.run(" ".join(argv), timeout=600)
    finally:
        samples = watch.finish()
        print(loaded.run("tc -s qdisc show dev eth0").out)
        removed = loaded.run([python, "-c", UNPACE], timeout=300)
    print(done.out)
    assert done.rc == 0, done.err[-3000:]
    assert "equal to the source" in done.out
    found = re.search(r"^copied (\d+) bytes in ([\d.]+) s", done.out, re.MULTILINE)
    assert found is not None
    rate = int(found[1]) * 8 / float(found[2])
    wire = samples.peak_rate(1.0) * 8
    print(f"received on the tap: at most {wire / 1e6:.1f} Mbit/s over 1 s")
    share = rate / PLAN_BPS
    print(
        f"a copy paced by ipg at {PLAN_BPS / 1e6:.0f} Mbit/s (gap {shown['gap']} byte times "
        f"on 1 Gbit/s): {rate / 1e6:.1f} Mbit/s of data, {share:.2f} of the plan"
    )
    # Never above the plan, on the wire or in data. Not asserted: reaching it. TCP
    # gets 0.4-0.7 of the plan through ipg in this guest (iperf3 -P 4 too), where UDP
    # trains keep the gap within 5% and TBF with a 64 KiB bucket passes 0.95-0.99 of
    # TCP. A catch-up credit of 500 us in the module did not help TCP and broke the
    # gaps (median 106 us of 123); the cause is not found yet.
    assert wire <= 1.02 * PLAN_BPS
    assert rate <= PLAN_BPS
    assert removed.rc == 0 and removed.out.strip() == "True", removed.err
    assert "ipg" not in loaded.check("tc qdisc show dev eth0")


def test_unloading_leaves_nothing_behind(loaded: Guest) -> None:
    loaded.check(f"python3 - {LINE_RATE} 1538", input=CONFIGURE.encode())  # a qdisc is in use ...
    loaded.check("tc qdisc del dev eth0 root && rmmod sch_ipg")  # ... removed, then the module
    assert "sch_ipg" not in loaded.check("cat /proc/modules")
    assert "ipg" not in loaded.check("tc qdisc show dev eth0")
    assert loaded.run("test -e /sys/module/sch_ipg").rc != 0
