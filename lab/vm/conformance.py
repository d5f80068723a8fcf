"""libiscsi's conformance suite against LIO in a guest, beside our target and tgt.

    python -m reservoir.lab.vm.conformance [--test ALL]

LIO serves from a guest booted for the run, reached over a tap from a lab namespace,
provisioned as a user would: ``reservoir target lio apply`` with a target file
(a fileio LUN, ``open = true``: every initiator admitted, no CHAP). Our target and tgt
serve on loopback (as ``make conformance`` runs them). Each gets a fresh LUN of the
same size. Under TCG the guest's side is slow: this is a benchmark that prints the
counts, not a test.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reservoir.lab import netns
from reservoir.lab.compare_targets import CONFORMANCE_LUN, conformance
from reservoir.lab.errors import LabError
from reservoir.lab.netns import exec_argv
from reservoir.lab.peers import SuiteResult, parse_test_cu
from reservoir.lab.vm import host_python
from reservoir.lab.vm.guest import Guest
from reservoir.lab.vm.image import ensure_image
from reservoir.lab.vm.net import add_tap

IQN = "iqn.2026-11.org.reservoir:lio-conformance"
HOST, GUEST = "10.97.0.1", "10.97.0.2"


CONFIG, LUN_FILE = "/root/conformance.toml", "/var/tmp/conformance.img"
TARGET_FILE = f"""
[server]
portals = ["{GUEST}:3260"]

[[target]]
iqn = "{IQN}"
open = true

[[target.lun]]
id = 0
path = "{LUN_FILE}"
"""


def provision(guest: Guest) -> None:
    """LIO with one open fileio LUN, by ``reservoir target lio apply`` in the guest."""
    guest.check(f"truncate -s {CONFORMANCE_LUN} {LUN_FILE}")
    guest.check(f"cat > {CONFIG}", input=TARGET_FILE.encode())
    argv = host_python.module_argv(
        "reservoir.agent.target.lio_cli", "apply", "--config", CONFIG, "--no-save"
    )
    print(guest.check(" ".join(argv), timeout=600).strip(), flush=True)


def lio_suite(test: str, timeout: float) -> SuiteResult:
    ns = f"rsv-conf-{os.getpid()}"
    netns.add(ns)
    try:
        add_tap(ns, "rsvconf0", f"{HOST}/24")
        shares = host_python.shares()
        with Guest(ensure_image(), "conformance", netns=ns, taps=["rsvconf0"], shares=shares) as g:
            g.check(f"ip addr add {GUEST}/24 dev eth0 && ip link set eth0 up")
            provision(g)
            argv = ["iscsi-test-cu", "--dataloss", "--test", test, "-v",
                    f"iscsi://{GUEST}:3260/{IQN}/0"]  # fmt: skip
            done = subprocess.run(
                exec_argv(ns, argv), capture_output=True, text=True, timeout=timeout, check=False
            )
            return parse_test_cu(done.stdout + done.stderr)
    finally:
        netns.delete(ns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reservoir.lab.vm.conformance")
    parser.add_argument("--test", default="ALL", help="iscsi-test-cu --test (default ALL)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds for LIO's run")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        lio_result = lio_suite(args.test, args.timeout)
    except (LabError, subprocess.TimeoutExpired) as exc:
        print(f"conformance: LIO: {exc}", file=sys.stderr)
        return 1
    print(f"  {'lio':10s} {lio_result.summary()} ({time.monotonic() - started:.0f} s, guest)")
    with tempfile.TemporaryDirectory() as tmp:
        conformance(Path(tmp), args.test)  # prints ours and tgt's
    for name in lio_result.failed:
        print(f"  lio failed: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
