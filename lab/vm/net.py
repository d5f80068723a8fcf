"""Taps for guests, made in a lab namespace (qemu runs there and opens them), with
the namespace's end addressed: a guest's ``ethN`` and the namespace then talk over a
real link. Deleting the namespace deletes its taps."""

from __future__ import annotations

from reservoir.lab.netns import ns_run

__all__ = ["add_tap"]


def add_tap(ns: str, name: str, address: str | None = None) -> None:
    """Adds tap ``name`` in namespace ``ns``, up, with ``address`` (CIDR) if given."""
    ns_run(ns, ["ip", "tuntap", "add", "dev", name, "mode", "tap"], f"ip tuntap add {name}")
    if address is not None:
        ns_run(ns, ["ip", "addr", "add", address, "dev", name], f"ip addr add {address}")
    ns_run(ns, ["ip", "link", "set", name, "up"], f"ip link set {name} up")
