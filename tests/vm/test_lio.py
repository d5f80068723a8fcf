"""Our initiator against LIO, the kernel's target, in a guest: ``reservoir copy`` from
the lab namespace into a LIO LUN (CHAP), verified by the copy and by the guest reading
the LUN's file back; and libiscsi's conformance suite against that LIO, beside our
target on the same link (the full suite is a benchmark: ``python -m
reservoir.lab.vm.conformance``)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.lab.netns import exec_argv
from reservoir.lab.peers import parse_test_cu, reservoir_command
from reservoir.lab.vm import Guest, lio
from reservoir.lab.vm.open_iscsi import Chap

from .conftest import GUEST_ADDRESSES

pytestmark = pytest.mark.vm

COPY_IQN = "iqn.2026-11.org.reservoir:lio-copy"
OPEN_IQN = "iqn.2026-11.org.reservoir:lio-open"
INITIATOR = "iqn.2026-11.org.reservoir:copier"
CHAP = Chap("copier", "copier-secret-0123456789")
LUN_BYTES = 64 << 20
SOURCE_BYTES = 24 << 20
# a few of libiscsi's suites, each a command family (the whole suite runs in the bench)
SUITES = "ALL.Read10,ALL.Write10,ALL.TestUnitReady,ALL.Inquiry,ALL.ReadCapacity10"


@pytest.fixture(scope="module")
def lio_guest(guest: Guest) -> Iterator[Guest]:
    address = GUEST_ADDRESSES[0]
    lio.serve_fileio(guest, COPY_IQN, initiator=INITIATOR, chap=CHAP,
                     size_bytes=LUN_BYTES, portal=f"{address}:3260")  # fmt: skip
    lio.serve_fileio(guest, OPEN_IQN, initiator=None, chap=None,
                     size_bytes=LUN_BYTES, portal=f"{address}:3261")  # fmt: skip
    try:
        yield guest
    finally:
        lio.clear(guest)


# Four streams: LIO lets only the session that reserved a LUN write under the hold's
# Registrants Only reservation (it treats the other ISIDs of a registered initiator
# name as unregistered: isid_mismatch in target_core_pr.c), so the copy finds out
# with an empty write and holds the LUN by registration only, and says so.
def test_reservoir_copies_into_a_lio_lun_and_verifies(
    lio_guest: Guest, lab_ns: str, tmp_path: Path
) -> None:
    source = tmp_path / "source.img"
    data = os.urandom(SOURCE_BYTES)
    source.write_bytes(data)
    url = f"iscsi://{GUEST_ADDRESSES[0]}:3260/{COPY_IQN}/0"
    argv = [*reservoir_command(), "copy", str(source), url, "--streams", "4",
            "--initiator-name", INITIATOR, "--chap", f"{CHAP.user}:{CHAP.secret}",
            "--checkpoint", str(tmp_path / "copy.ckpt")]  # fmt: skip
    done = subprocess.run(
        exec_argv(lab_ns, argv), capture_output=True, text=True, timeout=600, check=False
    )
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stderr
    assert "(verified: each extent hashed from storage;" in done.stdout
    assert "equal to the source; 0 mismatches resent while copying, 0 at the end" in done.stdout
    assert "held by registration only: other Reservoir copies were kept out" in done.stdout
    assert "lost:" not in done.stdout  # all four streams wrote
    name = COPY_IQN.rsplit(":", 1)[1]
    registered = lio_guest.check(
        f"cat /sys/kernel/config/target/core/*/{name}/pr/res_pr_registered_i_pts"
    )
    # the copy's CLEAR removed every registration at the end
    assert registered.split() == ["SPC-3", "PR", "Registrations:", "None"]
    guest_sum = lio_guest.check(
        f"dd if=/var/tmp/{name}.img bs=1M count={SOURCE_BYTES >> 20} status=none | sha256sum"
    ).split()[0]
    assert guest_sum == hashlib.sha256(data).hexdigest()


def test_libiscsi_suites_pass_against_lio(lio_guest: Guest, lab_ns: str) -> None:
    url = f"iscsi://{GUEST_ADDRESSES[0]}:3261/{OPEN_IQN}/0"
    argv = ["iscsi-test-cu", "--dataloss", "--test", SUITES, "-v", url]
    done = subprocess.run(
        exec_argv(lab_ns, argv), capture_output=True, text=True, timeout=900, check=False
    )
    result = parse_test_cu(done.stdout + done.stderr)
    print(f"iscsi-test-cu against LIO ({SUITES}): {result.summary()}")
    assert result.passed and not result.failed, result.details
