"""Fixtures of the VM lab tests: the guest image (built once, cached), a lab namespace
with a tap for the guest, and a guest booted in it; all taken down after a failure
too. A test skips, with the reason, where guests cannot be built or booted here."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from reservoir.lab import netns
from reservoir.lab.vm import Guest, GuestImage, VmUnavailable, add_tap, ensure_image

NS = f"rsv-vm-{os.getpid()}"
HOST_ADDRESS = "10.98.0.1"
GUEST_ADDRESS = "10.98.0.2"
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
        return ensure_image(say=lambda line: print(line, flush=True))
    except VmUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def lab_ns(image: GuestImage) -> Iterator[str]:
    """A namespace with tap ``rsvtap0`` at HOST_ADDRESS, the guest's eth0 beside it."""
    netns.delete(NS)
    netns.add(NS)
    try:
        add_tap(NS, "rsvtap0", f"{HOST_ADDRESS}/{PREFIX}")
        yield NS
    finally:
        netns.delete(NS)


@pytest.fixture(scope="module")
def guest(image: GuestImage, lab_ns: str) -> Iterator[Guest]:
    with Guest(image, "g1", netns=lab_ns, taps=["rsvtap0"]) as g:
        print(f"vm: guest booted in {g.boot_seconds:.1f} s (kernel {g.kernel})", flush=True)
        g.check(f"ip addr add {GUEST_ADDRESS}/{PREFIX} dev eth0 && ip link set eth0 up")
        yield g
