"""open-iscsi, the Linux initiator storage nodes run, against our target: from a guest
with Debian's kernel, over a real link from the lab namespace the target serves in.

Discovery lists the portal; login with one-way CHAP and with mutual CHAP, header and
data digests CRC32C; a file system made on the LUN, files written, unmounted, fsck
clean, logged out and in again and read back equal by hash; a wrong secret refused
while the target keeps serving; the target's log names the initiator. The session
log is printed (``pytest -s``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.lab.netns import ns_run
from reservoir.lab.vm import Guest, lio, serving_target
from reservoir.lab.vm.open_iscsi import Chap, Node, OpenIscsi

from .conftest import HOST_ADDRESSES, TAPS

pytestmark = pytest.mark.vm

PORTALS = tuple(f"{address}:3260" for address in HOST_ADDRESSES)
PORTAL = PORTALS[0]
INITIATOR = "iqn.2026-11.org.reservoir:guest1"
ONE_WAY = "iqn.2026-11.org.reservoir:chap"
MUTUAL = "iqn.2026-11.org.reservoir:mutual"
HOST_CHAP = Chap("guest1", "guest1-secret-0123456789")
TARGET_CHAP = Chap("target1", "target1-secret-9876543210")
LUN_BYTES = 64 << 20
FILES = 4  # of 4 MiB each


def _config(tmp: Path) -> Path:
    luns = {iqn: tmp / f"{iqn.rsplit(':', 1)[1]}.img" for iqn in (ONE_WAY, MUTUAL)}
    for lun in luns.values():
        with open(lun, "wb") as f:
            f.truncate(LUN_BYTES)
    chap = f'chap = {{ user = "{HOST_CHAP.user}", secret = "{HOST_CHAP.secret}" }}'
    mutual = f'mutual_chap = {{ user = "{TARGET_CHAP.user}", secret = "{TARGET_CHAP.secret}" }}'
    text = f"[server]\nportals = {json.dumps(list(PORTALS))}\n"
    for iqn, extra in ((ONE_WAY, ""), (MUTUAL, mutual)):
        text += (
            f'\n[[target]]\niqn = "{iqn}"\nallow = ["{INITIATOR}"]\n{chap}\n{extra}\n'
            f'[[target.lun]]\nid = 0\npath = "{luns[iqn]}"\n'
        )
    config = tmp / "target.toml"
    config.write_text(text)
    config.chmod(0o600)
    return config


@pytest.fixture(scope="module")
def target_log(lab_ns: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Our target serving both targets in the lab namespace; its log."""
    tmp = tmp_path_factory.mktemp("target")
    log = tmp / "target.log"
    with serving_target(lab_ns, ["--config", str(_config(tmp))], log):
        yield log


@pytest.fixture(scope="module")
def iscsi(guest: Guest, target_log: Path) -> Iterator[OpenIscsi]:
    client = OpenIscsi(guest, INITIATOR)
    client.start()
    try:
        yield client
    finally:
        client.stop()  # the guest serves the other modules' tests


def _filesystem_round_trip(iscsi: OpenIscsi, node: Node) -> str:
    """mkfs, files, fsck, logout and login, read back: the fsck output."""
    g = iscsi.guest
    disk = iscsi.disk(node)
    g.check(f"mkfs.ext4 -q -F {disk} && mkdir -p /mnt/lun && mount {disk} /mnt/lun")
    g.check(
        f"for i in $(seq {FILES}); do dd if=/dev/urandom of=/mnt/lun/f$i bs=1M count=4 "
        "status=none; done && cd /mnt/lun && sha256sum f* > /tmp/sums && cd / && umount /mnt/lun",
        timeout=300,
    )
    fsck = iscsi.run(["fsck.ext4", "-f", "-n", disk], timeout=300, check=False)
    assert fsck.rc == 0, fsck.out + fsck.err
    iscsi.logout(node)
    iscsi.login(node)  # what is read next comes from the target, not the page cache
    disk = iscsi.disk(node)
    g.check(f"mount -o ro {disk} /mnt/lun")
    try:
        check = g.check("cd /mnt/lun && sha256sum -c /tmp/sums")
    finally:
        g.check("umount /mnt/lun")
    iscsi.log.append(f"$ sha256sum -c /tmp/sums\n{check.rstrip()}")
    assert check.count(": OK") == FILES
    return fsck.out


def test_discovery_lists_both_targets_at_every_portal(iscsi: OpenIscsi) -> None:
    found = iscsi.discover(PORTAL)
    assert sorted(found) == sorted((p, iqn) for p in PORTALS for iqn in (ONE_WAY, MUTUAL))


@pytest.mark.parametrize(
    ("iqn", "mutual"), [(ONE_WAY, None), (MUTUAL, TARGET_CHAP)], ids=["one-way", "mutual"]
)
def test_chap_and_digests_carry_a_file_system_that_checks_clean(
    iscsi: OpenIscsi, target_log: Path, iqn: str, mutual: Chap | None
) -> None:
    node = Node(iqn, PORTAL, chap=HOST_CHAP, mutual=mutual, digests=True)
    iscsi.discover(PORTAL)
    iscsi.configure(node)
    iscsi.login(node)
    try:
        params = iscsi.session(node)
        assert (params["HeaderDigest"], params["DataDigest"]) == ("CRC32C", "CRC32C")
        fsck = _filesystem_round_trip(iscsi, node)
    finally:
        iscsi.logout(node)
    print("\n".join(iscsi.log))
    assert " files (" in fsck  # fsck -f -n ran every pass and found nothing (exit 0)
    logged = target_log.read_text()
    assert f"login: {INITIATOR} from " in logged and f"to {iqn}" in logged
    assert f"CHAP user {HOST_CHAP.user}" in logged


def test_a_wrong_secret_is_refused_and_the_target_keeps_serving(
    iscsi: OpenIscsi, target_log: Path
) -> None:
    wrong = Node(ONE_WAY, PORTAL, chap=Chap(HOST_CHAP.user, "not-the-secret-at-all"))
    iscsi.discover(PORTAL)
    iscsi.configure(wrong)
    assert not iscsi.login(wrong, check=False)
    assert f"login of {INITIATOR} from" in target_log.read_text()
    right = Node(ONE_WAY, PORTAL, chap=HOST_CHAP, digests=True)
    iscsi.configure(right)
    iscsi.login(right)
    try:
        assert iscsi.disk(right).startswith("/dev/sd")
    finally:
        iscsi.logout(right)


def test_the_same_steps_against_lio_the_kernels_target(iscsi: OpenIscsi) -> None:
    """The reference: LIO in the guest, provisioned with targetcli, same initiator."""
    iqn = "iqn.2026-11.org.reservoir:lio"
    lio.serve_fileio(iscsi.guest, iqn, initiator=INITIATOR, chap=HOST_CHAP, mutual=TARGET_CHAP)
    node = Node(iqn, "127.0.0.1:3260", chap=HOST_CHAP, mutual=TARGET_CHAP, digests=True)
    try:
        assert iscsi.discover(node.portal) == [(node.portal, iqn)]
        iscsi.configure(node)
        iscsi.login(node)
        try:
            params = iscsi.session(node)
            assert (params["HeaderDigest"], params["DataDigest"]) == ("CRC32C", "CRC32C")
            _filesystem_round_trip(iscsi, node)
        finally:
            iscsi.logout(node)
    finally:
        lio.clear(iscsi.guest)
    print("\n".join(iscsi.log))


MULTIPATH_MIB = 48


def test_two_sessions_over_two_portals_carry_io_through_a_cut_portal(
    iscsi: OpenIscsi, lab_ns: str
) -> None:
    """dm-multipath over two sessions (one a portal), both carrying I/O; the second
    portal's link is cut: the next write stalls until that session gives up (5 s),
    then completes on the first path, and everything reads back equal."""
    g = iscsi.guest
    nodes = [Node(ONE_WAY, p, chap=HOST_CHAP, replacement_timeout=5) for p in PORTALS]
    iscsi.discover(PORTAL)
    for node in nodes:
        iscsi.configure(node)
        iscsi.login(node)
    try:
        disks = [iscsi.disk(node) for node in nodes]
        assert len(set(disks)) == 2
        sectors = int(g.check(f"blockdev --getsz {disks[0]}"))
        paths = " ".join(f"{g.check(f'lsblk -dno MAJ:MIN {d}').strip()} 1" for d in disks)
        g.check(
            "modprobe dm_multipath && dmsetup create rsvmp --table "
            f"'0 {sectors} multipath 0 0 1 1 round-robin 0 2 1 {paths}' && dmsetup mknodes rsvmp"
        )  # mknodes: no udev makes /dev/mapper/rsvmp
        g.check(f"dd if=/dev/urandom of=/tmp/src bs=1M count={MULTIPATH_MIB} status=none")
        g.check("dd if=/tmp/src of=/dev/mapper/rsvmp bs=1M count=8 oflag=direct status=none")
        ns_run(lab_ns, ["ip", "link", "set", TAPS[1], "down"], "cut the second portal")
        write = g.run("dd if=/tmp/src of=/dev/mapper/rsvmp bs=1M oflag=direct", timeout=300)
        assert write.rc == 0, write.err
        iscsi.log.append(f"# {MULTIPATH_MIB} MiB written through the cut in {write.seconds:.1f} s")
        status = g.check("dmsetup status rsvmp")
        iscsi.log.append(f"$ dmsetup status rsvmp\n  {status.strip()}")
        assert " F " in f" {status} " and " A " in f" {status} "  # one path failed, one active
        read = g.check(
            f"dd if=/dev/mapper/rsvmp bs=1M count={MULTIPATH_MIB} iflag=direct status=none "
            "| sha256sum && sha256sum < /tmp/src"
        ).split()
        assert read[0] == read[2]
    finally:
        ns_run(lab_ns, ["ip", "link", "set", TAPS[1], "up"], "restore the second portal")
        g.run("dmsetup remove --force rsvmp")
        for node in nodes:
            iscsi.guest.run(
                ["iscsiadm", "-m", "node", "-T", node.iqn, "-p", node.portal, "--logout"]
            )
    print("\n".join(iscsi.log[-6:]))
