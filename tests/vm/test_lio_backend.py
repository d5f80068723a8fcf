"""LIO as a backend of ``reservoir target``: in a guest, the host's Reservoir (shared
read-only at its own paths) provisions LIO from the same TOML the builtin target
reads, with a fileio and a block backstore, an ACL with mutual CHAP and an open
target; ``reservoir copy`` from the lab namespace into the provisioned LUN verifies;
libiscsi's suites run against the provisioned target; the configuration is saved,
cleared and restored like targetcli's saveconfig; a bad file changes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.lab.netns import exec_argv
from reservoir.lab.peers import parse_test_cu, reservoir_command
from reservoir.lab.vm import Guest, host_python
from reservoir.lab.vm.guest import Result

from .conftest import GUEST_ADDRESSES

pytestmark = pytest.mark.vm

A_IQN = "iqn.2026-11.org.reservoir:lio-backend-a"
B_IQN = "iqn.2026-11.org.reservoir:lio-backend-b"
INITIATOR = "iqn.2026-11.org.reservoir:copier"
CHAP = ("copier", "copier-secret-0123456789")
MUTUAL = ("lio-a", "target-secret-9876543210")
A_FILE, B_FILE = "/var/tmp/rsv-a.img", "/var/tmp/rsv-b.img"
CONFIG, SAVED = "/root/lio.toml", "/root/saveconfig.json"
LUN_MIB, SOURCE_BYTES = 64, 24 << 20
SUITES = "ALL.Read10,ALL.Write10,ALL.TestUnitReady,ALL.Inquiry,ALL.ReadCapacity10"
CONFIGFS = "/sys/kernel/config/target"


def _config(loop: str) -> str:
    return f"""
[server]
portals = ["{GUEST_ADDRESSES[0]}:3260"]

[[target]]
iqn = "{A_IQN}"
alias = "a"
allow = ["{INITIATOR}"]
chap = {{ user = "{CHAP[0]}", secret = "{CHAP[1]}" }}
mutual_chap = {{ user = "{MUTUAL[0]}", secret = "{MUTUAL[1]}" }}

[[target.lun]]
id = 0
path = "{A_FILE}"

[[target]]
iqn = "{B_IQN}"
alias = "b"
open = true

[[target.lun]]
id = 0
path = "{loop}"
"""


def _lio(guest: Guest, *args: str) -> Result:
    """``reservoir target lio ARGS`` in the guest, by its module (Python starts slowly
    under emulation; ``reservoir target lio`` itself runs in the first test)."""
    argv = host_python.module_argv("reservoir.agent.target.lio_cli", *args)
    return guest.run(" ".join(argv), timeout=300)


@pytest.fixture(scope="module")
def lio_guest(guest: Guest) -> Iterator[str]:
    """The guest with the two backing volumes and the file; yields the loop device."""
    guest.check(f"truncate -s {LUN_MIB}M {A_FILE} {B_FILE} && modprobe loop")
    loop = guest.check(f"losetup --find --show {B_FILE}").strip()
    guest.check(f"umask 077 && cat > {CONFIG}", input=_config(loop).encode())
    try:
        yield loop
    finally:
        _lio(guest, "clear", "--config", CONFIG, "--no-save")
        guest.run(f"losetup -d {loop}")


@pytest.fixture(scope="module")
def applied(guest: Guest, lio_guest: str) -> Result:
    argv = host_python.argv("target", "lio", "apply", "--config", CONFIG, "--save-file", SAVED)
    done = guest.run(" ".join(argv), timeout=300)
    print(done.out, done.err)
    return done


def test_apply_provisions_lio_from_the_target_file(guest: Guest, applied: Result) -> None:
    assert applied.rc == 0, applied.err
    lines = applied.out.splitlines()
    assert f"target {A_IQN}" in lines and f"target {B_IQN}" in lines
    assert f"backstore fileio rsv-a-0 {A_FILE}" in lines
    assert any(line.startswith("backstore block rsv-b-0 /dev/loop") for line in lines)
    assert f"access {A_IQN}: the initiators {INITIATOR} with CHAP" in lines
    assert f"access {B_IQN}: every initiator, without CHAP (open)" in lines
    assert CHAP[1] not in applied.out and MUTUAL[1] not in applied.out
    tpg = f"{CONFIGFS}/iscsi/{A_IQN}/tpgt_1"
    acl = f"{tpg}/acls/{INITIATOR}"
    assert guest.check(f"cat {tpg}/enable {tpg}/attrib/authentication").split() == ["1", "1"]
    assert guest.check(f"cat {acl}/auth/userid {acl}/auth/userid_mutual").split() == [
        CHAP[0],
        MUTUAL[0],
    ]
    assert guest.check(f"ls {tpg}/np").split() == [f"{GUEST_ADDRESSES[0]}:3260"]
    open_tpg = f"{CONFIGFS}/iscsi/{B_IQN}/tpgt_1/attrib"
    assert guest.check(f"cat {open_tpg}/generate_node_acls {open_tpg}/authentication").split() == [
        "1",
        "0",
    ]
    saved = json.loads(guest.check(f"cat {SAVED}"))
    assert {t["wwn"] for t in saved["targets"]} >= {A_IQN, B_IQN}
    assert guest.check(f"stat -c %a {SAVED}").strip() == "600"


def test_a_copy_into_the_provisioned_lun_verifies(
    guest: Guest, applied: Result, lab_ns: str, tmp_path: Path
) -> None:
    assert applied.rc == 0, applied.err
    source = tmp_path / "source.img"
    data = os.urandom(SOURCE_BYTES)
    source.write_bytes(data)
    url = f"iscsi://{GUEST_ADDRESSES[0]}:3260/{A_IQN}/0"
    argv = [*reservoir_command(), "copy", str(source), url, "--streams", "4",
            "--initiator-name", INITIATOR, "--chap", ":".join(CHAP),
            "--mutual-chap", ":".join(MUTUAL),
            "--checkpoint", str(tmp_path / "copy.ckpt")]  # fmt: skip
    done = subprocess.run(
        exec_argv(lab_ns, argv), capture_output=True, text=True, timeout=600, check=False
    )
    print(done.stdout)
    assert done.returncode == 0, done.stderr
    assert "equal to the source; 0 mismatches resent while copying, 0 at the end" in done.stdout
    assert "lost:" not in done.stdout  # all four streams wrote
    # LIO lets only the reserving session write under the hold's reservation (it takes
    # the other ISIDs of one initiator name for unregistered): the copy found that out
    # and held the LUN by registration; its CLEAR at the end left none behind
    assert "held by registration only: other Reservoir copies were kept out" in done.stdout
    registered = guest.check(f"cat {CONFIGFS}/core/*/rsv-a-0/pr/res_pr_registered_i_pts")
    assert registered.split() == ["SPC-3", "PR", "Registrations:", "None"]
    guest_sum = guest.check(
        f"dd if={A_FILE} bs=1M count={SOURCE_BYTES >> 20} status=none | sha256sum"
    ).split()[0]
    assert guest_sum == hashlib.sha256(data).hexdigest()


def test_a_wrong_secret_is_refused_by_the_provisioned_target(
    applied: Result, lab_ns: str, tmp_path: Path
) -> None:
    assert applied.rc == 0, applied.err
    source = tmp_path / "source.img"
    source.write_bytes(bytes(1 << 20))
    url = f"iscsi://{GUEST_ADDRESSES[0]}:3260/{A_IQN}/0"
    argv = [*reservoir_command(), "copy", str(source), url, "--initiator-name", INITIATOR,
            "--chap", f"{CHAP[0]}:not-the-secret-000000",
            "--checkpoint", str(tmp_path / "copy.ckpt")]  # fmt: skip
    done = subprocess.run(
        exec_argv(lab_ns, argv), capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode != 0
    assert "authentication" in done.stderr.lower()


def test_libiscsi_suites_pass_against_the_provisioned_block_lun(
    applied: Result, lab_ns: str
) -> None:
    assert applied.rc == 0, applied.err
    url = f"iscsi://{GUEST_ADDRESSES[0]}:3260/{B_IQN}/0"
    argv = ["iscsi-test-cu", "--dataloss", "--test", SUITES, "-v", url]
    done = subprocess.run(
        exec_argv(lab_ns, argv), capture_output=True, text=True, timeout=900, check=False
    )
    result = parse_test_cu(done.stdout + done.stderr)
    print(f"iscsi-test-cu against LIO as Reservoir provisioned it: {result.summary()}")
    assert len(result.passed) >= 15 and not result.failed, result.details


def test_clear_then_restore_brings_the_saved_configuration_back(
    guest: Guest, applied: Result
) -> None:
    assert applied.rc == 0, applied.err
    cleared = _lio(guest, "clear", "--config", CONFIG, "--no-save")
    assert cleared.rc == 0, cleared.err
    assert f"removed {A_IQN}" in cleared.out.splitlines()
    assert guest.run(f"test -e {CONFIGFS}/iscsi/{A_IQN}").rc != 0
    restored = _lio(guest, "restore", "--save-file", SAVED)
    assert restored.rc == 0, restored.err
    acl = f"{CONFIGFS}/iscsi/{A_IQN}/tpgt_1/acls/{INITIATOR}"
    assert guest.check(f"cat {acl}/auth/userid").strip() == CHAP[0]
    assert guest.check(f"ls {CONFIGFS}/core/*/rsv-a-0/udev_path").strip()
    again = _lio(guest, "restore", "--save-file", SAVED)  # everything is there already
    assert again.rc == 2 and "exist" in again.err


def test_a_bad_file_is_refused_and_lio_is_left_as_it_was(guest: Guest, applied: Result) -> None:
    assert applied.rc == 0, applied.err
    before = guest.check(f"ls {CONFIGFS}/iscsi {CONFIGFS}/core/*")
    guest.check(
        f'sed \'s/^alias = "a"/alias = "a"\\nwrite_cache = true/\' {CONFIG} > /root/bad.toml'
    )
    unknown = _lio(guest, "apply", "--config", "/root/bad.toml")
    assert unknown.rc == 2 and "write_cache" in unknown.err
    guest.check(f"sed 's#{A_FILE}#/var/tmp/missing.img#' {CONFIG} > /root/missing.toml")
    missing = _lio(guest, "apply", "--config", "/root/missing.toml")
    assert missing.rc == 2 and "/var/tmp/missing.img" in missing.err
    assert guest.check(f"ls {CONFIGFS}/iscsi {CONFIGFS}/core/*") == before
