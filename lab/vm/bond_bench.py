"""The bonded multilink device against Reservoir's own paths and MPTCP, on the same
two links: ``python -m reservoir.lab.vm.bond_bench [--mib N] [--streams N]``.

A guest copies a volume with the host's Reservoir to our target in the lab
namespace over its two links, four ways: a kernel bond (balance-xor, layer3+4),
a kernel bond (balance-rr), Reservoir's paths (``--path`` per link), and MPTCP
(``--mptcp``, a subflow per link). Each way runs twice: whole, then with one link
cut at both ends after a quarter of the copy (:class:`.bond.LinkCut`). It prints
the copy's rate, what each link carried (the guest's counters) and the window of
lost throughput at the receiving side. Under TCG the guest's CPU bounds every
rate alike: read the rates against each other, and the windows as they are.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from reservoir.lab import netns
from reservoir.lab.netns import ns_run
from reservoir.lab.vm import (
    Guest,
    accelerator,
    add_tap,
    bond,
    ensure_image,
    host_python,
    serving_target,
)

NS = f"rsv-bond-{os.getpid()}"
TAPS = ("rsvbt0", "rsvbt1")
SLAVES = ("eth0", "eth1")
HOSTS, GUESTS = ("10.96.0.1", "10.96.1.1"), ("10.96.0.2", "10.96.1.2")
HOST_BOND, GUEST_BOND = "10.96.2.1", "10.96.2.2"
IQN = "iqn.2026-11.org.reservoir:bond-bench"
INITIATOR = "iqn.2026-11.org.reservoir:bond-bench-copier"
SOURCE = "/var/tmp/bench-source.img"
WAYS = ("bond balance-xor", "bond balance-rr", "paths", "mptcp")


@dataclass
class Row:
    way: str
    cut: bool
    mb_s: float
    split: dict[str, int]
    window: float | None
    verified: bool

    def line(self) -> str:
        total = sum(self.split.values()) or 1
        shares = "/".join(f"{100 * n / total:.0f}" for n in self.split.values())
        window = "" if not self.cut else "n/a" if self.window is None else f"{self.window:.2f}"
        ok = "yes" if self.verified else "NO"
        run = "cut" if self.cut else "whole"
        return f"{self.way:<18}{run:>6}{self.mb_s:>9.1f}{shares:>11}{window:>10}{ok:>10}"


HEADER = f"{'way':<18}{'run':>6}{'MB/s':>9}{'eth0/eth1':>11}{'lost s':>10}{'verified':>10}"


@contextmanager
def lab(mib: int) -> Iterator[tuple[Guest, Path]]:
    """The namespace, the guest with its links and source, our target (MPTCP on)."""
    image = ensure_image(say=print)
    netns.delete(NS)
    netns.add(NS)
    try:
        for tap, address in zip(TAPS, HOSTS, strict=True):
            add_tap(NS, tap, f"{address}/24")
        bond.join_taps(NS, TAPS, HOST_BOND)
        with (
            tempfile.TemporaryDirectory(prefix="reservoir-bond-bench-") as work,
            Guest(image, "bench", netns=NS, taps=TAPS, shares=host_python.shares()) as guest,
        ):
            print(f"guest booted in {guest.boot_seconds:.1f} s")
            _addresses(guest)
            guest.check(f"dd if=/dev/urandom of={SOURCE} bs=1M count={mib} status=none")
            lun = Path(work) / "dest.img"
            lun.touch()
            os.truncate(lun, mib << 20)
            with serving_target(NS, _target_args(lun), Path(work) / "target.log"):
                limits = "ip mptcp limits set subflow 2 add_addr_accepted 2"
                ns_run(NS, limits.split(), "mptcp limits")
                ns_run(NS, ["ip", "mptcp", "endpoint", "add", HOSTS[1], "dev", TAPS[1],
                            "signal"], "mptcp endpoint")  # fmt: skip
                yield guest, lun
    finally:
        netns.delete(NS)


def _addresses(guest: Guest) -> None:
    for i, address in enumerate(GUESTS):
        guest.check(f"ip link set eth{i} up && ip addr replace {address}/24 dev eth{i}")


def _target_args(lun: Path) -> list[str]:
    portals = [a for h in (*HOSTS, HOST_BOND) for a in ("--portal", f"{h}:3260")]
    return [*portals, "--iqn", IQN, "--lun", str(lun), "--allow", INITIATOR, "--mptcp"]


def _mptcp(guest: Guest) -> None:
    """A subflow per link: the namespace signals its second address (set up with the
    lab), the guest opens a subflow from its second address."""
    guest.check(
        "ip mptcp endpoint flush && ip mptcp limits set subflow 2 add_addr_accepted 2 && "
        f"ip mptcp endpoint add {GUESTS[1]} dev eth1 subflow"
    )


def run_way(guest: Guest, way: str, streams: int, mib: int, cut: bool) -> Row:
    host = HOST_BOND if way.startswith("bond") else HOSTS[0]
    extra: list[str] = []
    if way == "paths":
        extra = [a for g, h in zip(GUESTS, HOSTS, strict=True) for a in ("--path", f"{g}={h}")]
    elif way == "mptcp":
        extra = ["--mptcp"]
        _mptcp(guest)
    if way.startswith("bond"):
        mac = bond.bond(guest, way.split()[1], SLAVES, f"{GUEST_BOND}/24")
        bond.reach(NS, TAPS, GUEST_BOND, mac)
    try:
        return _copy(guest, way, host, extra, streams=streams, mib=mib, cut=cut)
    finally:
        ns_run(NS, ["ip", "link", "set", TAPS[1], "up"], "tap up")
        if way.startswith("bond"):
            bond.unbond(guest, {s: f"{a}/24" for s, a in zip(SLAVES, GUESTS, strict=True)})
        _addresses(guest)


def _copy(
    guest: Guest, way: str, host: str, extra: list[str], *, streams: int, mib: int, cut: bool
) -> Row:
    name = re.sub(r"\W", "-", f"{way}-{cut}")
    argv = host_python.copy_argv(
        SOURCE, f"iscsi://{host}:3260/{IQN}/0", "--streams", str(streams),
        "--extent-size", str(1 << 20), "--initiator-name", INITIATOR,
        "--checkpoint", f"/tmp/{name}.ckpt", *extra,
    )  # fmt: skip
    before = bond.tx_bytes(guest, SLAVES)
    link = (TAPS[1], SLAVES[1]) if cut else None
    watch = bond.LinkCut(NS, TAPS, guest, link, after=(mib << 20) // 4)
    watch.start()
    try:
        done = guest.run(" ".join(argv), timeout=900)
    finally:
        samples = watch.finish()
    guest.run(f"ip link set {SLAVES[1]} up")
    after = bond.tx_bytes(guest, SLAVES)
    rate = re.search(r"^copied \d+ bytes in [\d.]+ s \(([\d.]+) MB/s\)", done.out, re.MULTILINE)
    if done.rc != 0 or rate is None:
        print(f"{way}: the copy failed: {done.err[-1500:]}")
    return Row(
        way,
        cut,
        float(rate[1]) if rate else 0.0,
        {s: after[s] - before[s] for s in SLAVES},
        samples.lost_window(),
        done.rc == 0 and "equal to the source" in done.out,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reservoir.lab.vm.bond_bench")
    parser.add_argument("--mib", type=int, default=64, help="the volume copied (MiB)")
    parser.add_argument("--streams", type=int, default=8)
    args = parser.parse_args(argv)
    rows = []
    with lab(args.mib) as (guest, _):
        for way in WAYS:
            for cut in (False, True):
                rows.append(run_way(guest, way, args.streams, args.mib, cut))
                print(rows[-1].line(), flush=True)
    print(f"\n{args.mib} MiB, {args.streams} streams, 2 links, guest under "
          f"{accelerator().upper()}\n{HEADER}")  # fmt: skip
    print("\n".join(row.line() for row in rows))
    return 0 if all(row.verified for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
