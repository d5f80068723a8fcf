"""libiscsi's conformance suite against LIO in a guest, beside our target and tgt.

    python -m reservoir.lab.vm.conformance [--test ALL]

LIO (fileio, every initiator admitted, no CHAP) serves from a guest booted for the
run, reached over a tap from a lab namespace; our target and tgt serve on loopback
(as ``make conformance`` runs them). Each gets a fresh LUN of the same size. Under
TCG the guest's side is slow: this is a benchmark that prints the counts, not a test.
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
from reservoir.lab.vm import lio
from reservoir.lab.vm.guest import Guest
from reservoir.lab.vm.image import ensure_image
from reservoir.lab.vm.net import add_tap

IQN = "iqn.2026-11.org.reservoir:lio-conformance"
HOST, GUEST = "10.97.0.1", "10.97.0.2"


def lio_suite(test: str, timeout: float) -> SuiteResult:
    ns = f"rsv-conf-{os.getpid()}"
    netns.add(ns)
    try:
        add_tap(ns, "rsvconf0", f"{HOST}/24")
        with Guest(ensure_image(), "conformance", netns=ns, taps=["rsvconf0"]) as g:
            g.check(f"ip addr add {GUEST}/24 dev eth0 && ip link set eth0 up")
            lio.serve_fileio(g, IQN, initiator=None, chap=None,
                             size_bytes=CONFORMANCE_LUN, portal=f"{GUEST}:3260")  # fmt: skip
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
