"""Fixtures of the VM lab tests: the guest image (built once, cached), a lab namespace
with two taps for the guest, and one guest booted in it for the whole session (a boot
costs about 30 s under TCG; every module leaves the guest and the namespace as it
found them); all taken down after a failure too. A test skips, with the reason,
where guests cannot be built or booted here."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from reservoir.lab import netns
from reservoir.lab.vm import (
    Guest,
    GuestImage,
    VmUnavailable,
    add_tap,
    ensure_image,
    host_python,
)

NS = f"rsv-vm-{os.getpid()}"
# two links between the lab namespace (taps rsvtap0, rsvtap1) and the guest (eth0, eth1)
HOST_ADDRESSES = ("10.98.0.1", "10.98.1.1")
GUEST_ADDRESSES = ("10.98.0.2", "10.98.1.2")
TAPS = ("rsvtap0", "rsvtap1")
PREFIX = 24


@pytest.fixture(scope="session")
def image() -> GuestImage:
    reason = netns.can_create()
    if reason is not None:
        pytest.skip(f"cannot create network namespaces here: {reason}")
    for tool in ("qemu-system-x86_64", "qemu-img", "mmdebstrap"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (run make install)")
    try:
        # the lab's one image: the base and what building a module needs
        return ensure_image(say=lambda line: print(line, flush=True))
    except VmUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def lab_ns(image: GuestImage) -> Iterator[str]:
    """A namespace with the taps at HOST_ADDRESSES, the guest's eth0 and eth1 beside them."""
    netns.delete(NS)
    netns.add(NS)
    try:
        for tap, address in zip(TAPS, HOST_ADDRESSES, strict=True):
            add_tap(NS, tap, f"{address}/{PREFIX}")
        yield NS
    finally:
        netns.delete(NS)


@pytest.fixture(scope="session")
def guest(image: GuestImage, lab_ns: str) -> Iterator[Guest]:
    """The guest, eth0 and eth1 at GUEST_ADDRESSES; 2 vCPUs (a copy in it and the
    qdiscs' trains need both)."""
    shares = host_python.shares()
    with Guest(image, "g1", netns=lab_ns, taps=TAPS, cpus=2, shares=shares) as g:
        print(f"vm: guest booted in {g.boot_seconds:.1f} s (kernel {g.kernel})", flush=True)
        for i, address in enumerate(GUEST_ADDRESSES):
            g.check(f"ip addr add {address}/{PREFIX} dev eth{i} && ip link set eth{i} up")
        yield g
