"""The delay line against netem on the same link and kernel:
``python -m reservoir.lab.vm.line_bench [--seconds S]``.

This machine's kernel has no sch_netem, a guest's has. In a guest the lab builds one
link between two namespaces twice, through the userspace delay line and through netem
(``line = "netem"``: a bridge with netem on each side's way out), and
:mod:`reservoir.lab.line_check` measures each: round-trip time and its standard
deviation from UDP probes, the probes lost, and one TCP stream's throughput (iperf3).
The cases: 100 and 500 Mbit/s at 10 ms each way, 1% loss each way, and 2 ms of jitter
each way. Under TCG the guest's timers and CPU are slower than a host's: read the two
lines against each other, and the delay line's rows on this host (natively, after the
guest is down) for what it does outside emulation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from reservoir.lab import line_check
from reservoir.lab.line_check import LineFigures
from reservoir.lab.spec import LINES
from reservoir.lab.vm import (
    Guest,
    accelerator,
    ensure_image,
    host_python,
)


@dataclass(frozen=True)
class Case:
    name: str
    rate_mbit: float
    delay_ms: float
    loss: float = 0.0
    jitter_us: float = 0.0
    probes: int = 500
    every: float = 0.004
    seconds: float = 0.0  # iperf3, 0: none

    def argv(self, line: str) -> list[str]:
        return host_python.module_argv(
            "reservoir.lab.line_check", "--line", line,
            "--rate-mbit", f"{self.rate_mbit:g}", "--delay-ms", f"{self.delay_ms:g}",
            "--loss", f"{self.loss:g}", "--jitter-us", f"{self.jitter_us:g}",
            "--probes", str(self.probes), "--every", f"{self.every:g}",
            "--seconds", f"{self.seconds:g}",
        )  # fmt: skip


def cases(seconds: float) -> list[Case]:
    return [
        Case("100 Mbit/s, 10 ms", 100, 10, seconds=seconds),
        Case("500 Mbit/s, 10 ms", 500, 10, seconds=seconds),
        Case("100 Mbit/s, 10 ms, 1% loss", 100, 10, loss=0.01, probes=2000, every=0.002),
        Case("100 Mbit/s, 10 ms, 2 ms jitter", 100, 10, jitter_us=2000),
    ]


def measure_in(guest: Guest, case: Case, line: str) -> LineFigures:
    """``case`` through ``line`` in ``guest``, measured there."""
    out = guest.check(case.argv(line), timeout=600)
    return LineFigures(**json.loads(out.strip().splitlines()[-1]))


def row(case: str, f: LineFigures) -> str:
    tcp = f"{f.throughput_mbit:10.1f}" if f.throughput_mbit else f"{'-':>10}"
    return (
        f"| {case:<31} | {f.line:<5} | {f.rtt_median_ms:6.2f} | {f.rtt_min_ms:6.2f} | "
        f"{f.jitter_ms:5.3f} | {100 * f.probe_loss:6.2f} | {tcp} | {f.retransmits:7d} | "
        f"{f.line_drops:7d} | {f.socket_drops:7d} |"
    )


HEADER = (
    "| case (each way)                 | line  | RTT ms | min ms | sd ms | lost % | TCP Mbit/s "
    "| retrans | dropped | sock dr |\n"
    "|---------------------------------|-------|--------|--------|-------|--------|------------"
    "|---------|---------|---------|"
)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m reservoir.lab.vm.line_bench", description=__doc__)
    p.add_argument("--seconds", type=float, default=8.0, help="iperf3 time per line (s)")
    args = p.parse_args(argv)
    # the lab's one image: it has the compiler the delay line is built with
    image = ensure_image(say=lambda line: print(line, flush=True))
    print(f"accelerator: {accelerator()}", flush=True)
    with Guest(image, "line-bench", cpus=2, shares=host_python.shares()) as guest:
        print(f"guest booted in {guest.boot_seconds:.1f} s (kernel {guest.kernel})", flush=True)
        print(HEADER)
        for case in cases(args.seconds):
            for line in LINES:
                began = time.monotonic()
                figures = measure_in(guest, case, line)
                print(row(case.name, figures), f"({time.monotonic() - began:.0f} s)", flush=True)
    print("\nthe delay line on this host, natively (the guest is down):")
    for case in cases(args.seconds):
        figures = line_check.measure(
            "dline", case.rate_mbit, case.delay_ms, case.loss, case.jitter_us,
            probes=case.probes, every=case.every, seconds=case.seconds,
        )  # fmt: skip
        print(row(case.name, figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
