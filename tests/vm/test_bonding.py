"""The streams of a copy over a kernel bonding device: the guest bonds its two links
(balance-xor with layer3+4 hashing, then balance-rr) and copies a volume with the
host's Reservoir to our target in the lab namespace. What each slave carried comes
from the guest's counters; a slave taken down mid-copy leaves a copy that completes
and verifies, and the window of lost throughput is measured. The comparison with
Reservoir's own paths and MPTCP on the same links is a benchmark
(``python -m reservoir.lab.vm.bond_bench``)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.lab.netns import ns_run
from reservoir.lab.vm import Guest, bond, host_python, serving_target

from .conftest import GUEST_ADDRESSES, PREFIX, TAPS

pytestmark = pytest.mark.vm

IQN = "iqn.2026-11.org.reservoir:bonded"
INITIATOR = "iqn.2026-11.org.reservoir:guest-copier"
HOST_BOND, GUEST_BOND = "10.98.2.1", "10.98.2.2"
SLAVES = ("eth0", "eth1")
SOURCE, SOURCE_MIB = "/var/tmp/bond-source.img", 32
EXTENT = 1 << 20


@pytest.fixture(scope="module")
def target(lab_ns: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Our target in the lab namespace at the bond's far address; yields its LUN file."""
    tmp = tmp_path_factory.mktemp("bond")
    lun = tmp / "dest.img"
    lun.write_bytes(b"")
    with open(lun, "r+b") as f:
        f.truncate(SOURCE_MIB << 20)
    macs = [ns_run(lab_ns, ["cat", f"/sys/class/net/{tap}/address"]).strip() for tap in TAPS]
    bond.join_taps(lab_ns, TAPS, HOST_BOND)
    args = ["--portal", f"{HOST_BOND}:3260", "--iqn", IQN, "--lun", str(lun),
            "--allow", INITIATOR]  # fmt: skip
    try:
        with serving_target(lab_ns, args, tmp / "target.log"):
            yield lun
    finally:
        bond.leave_taps(lab_ns, TAPS, HOST_BOND, GUEST_BOND, macs)


@pytest.fixture(scope="module")
def source(guest: Guest) -> Iterator[str]:
    """The source volume in the guest; its sha256."""
    guest.check(f"dd if=/dev/urandom of={SOURCE} bs=1M count={SOURCE_MIB} status=none")
    yield guest.check(f"sha256sum {SOURCE}").split()[0]
    guest.run(f"rm -f {SOURCE}")


@pytest.fixture
def bonded(guest: Guest, lab_ns: str, request: pytest.FixtureRequest) -> Iterator[str]:
    mode = request.param
    mac = bond.bond(guest, mode, SLAVES, f"{GUEST_BOND}/{PREFIX}")
    bond.reach(lab_ns, TAPS, GUEST_BOND, mac)
    try:
        yield mode
    finally:
        addresses = {s: f"{a}/{PREFIX}" for s, a in zip(SLAVES, GUEST_ADDRESSES, strict=True)}
        bond.unbond(guest, addresses)


def _copy(guest: Guest, streams: int, name: str) -> str:
    argv = host_python.copy_argv(
        SOURCE, f"iscsi://{HOST_BOND}:3260/{IQN}/0", "--streams", str(streams),
        "--extent-size", str(EXTENT), "--initiator-name", INITIATOR,
        "--checkpoint", f"/tmp/{name}.ckpt",
    )  # fmt: skip
    done = guest.run(" ".join(argv), timeout=600)
    print(done.out)
    assert done.rc == 0, done.err[-3000:]
    assert "equal to the source; 0 mismatches resent while copying" in done.out
    assert "lost:" not in done.out  # every stream carried its share
    return done.out


def _copied_bytes(out: str) -> int:
    found = re.search(r"^copied (\d+) bytes", out, re.MULTILINE)
    assert found is not None, out
    return int(found[1])


def _split(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {name: after[name] - before[name] for name in before}


@pytest.mark.parametrize("bonded", ["balance-xor"], indirect=True)
def test_balance_xor_carries_each_stream_on_one_slave_by_its_ports(
    guest: Guest, target: Path, source: str, bonded: str
) -> None:
    before = bond.tx_bytes(guest, SLAVES)
    out = _copy(guest, 16, "xor")
    sent = _split(before, bond.tx_bytes(guest, SLAVES))
    copied = _copied_bytes(out)
    print(f"bond {bonded}, 16 streams: per slave {sent} of {copied} bytes copied")
    assert sum(sent.values()) >= copied  # every byte left by a slave (plus headers)
    # 16 flows hashed on their ports: both slaves carry some (all on one: p = 2^-15)
    assert all(n > copied // 16 for n in sent.values()), sent
    assert hashlib.sha256(target.read_bytes()).hexdigest() == source


@pytest.mark.parametrize("bonded", ["balance-rr"], indirect=True)
def test_balance_rr_sends_the_packets_of_every_stream_in_turn(
    guest: Guest, target: Path, source: str, bonded: str
) -> None:
    before = bond.tx_bytes(guest, SLAVES)
    out = _copy(guest, 4, "rr")
    sent = _split(before, bond.tx_bytes(guest, SLAVES))
    print(f"bond {bonded}, 4 streams: per slave {sent} of {_copied_bytes(out)} bytes copied")
    share = sent["eth0"] / sum(sent.values())
    assert 0.4 <= share <= 0.6, sent  # packets in turn: an even split
    assert hashlib.sha256(target.read_bytes()).hexdigest() == source


@pytest.mark.parametrize("bonded", ["balance-xor"], indirect=True)
def test_a_slave_down_mid_copy_leaves_a_verified_copy(
    guest: Guest, lab_ns: str, target: Path, source: str, bonded: str
) -> None:
    target.write_bytes(bytes(SOURCE_MIB << 20))  # nothing of the last copy stays
    cut = bond.LinkCut(lab_ns, TAPS, guest, (TAPS[1], SLAVES[1]), after=(SOURCE_MIB << 20) // 4)
    cut.start()
    try:
        _copy(guest, 16, "cut")
    finally:
        samples = cut.finish()
        ns_run(lab_ns, ["ip", "link", "set", TAPS[1], "up"], "tap up")
        guest.run(f"ip link set {SLAVES[1]} up")
    assert samples.cut_at is not None, "the copy ended before the link was cut"
    window = samples.lost_window()
    print(f"bond {bonded}: {SLAVES[1]} cut after a quarter of the copy; throughput lost for "
          f"{'n/a' if window is None else f'{window:.2f} s'}")  # fmt: skip
    status = guest.check("cat /proc/net/bonding/bond0").split("Slave Interface: ")
    eth1 = next(part for part in status if part.startswith("eth1"))
    assert "Link Failure Count: 1" in eth1  # the bond saw the slave go down
    assert hashlib.sha256(target.read_bytes()).hexdigest() == source
