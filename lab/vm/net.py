"""Taps for guests, made in a lab namespace (qemu runs there and opens them), with
the namespace's end addressed: a guest's ``ethN`` and the namespace then talk over a
real link. Deleting the namespace deletes its taps. :func:`serving_target` runs our
target in such a namespace for the guests to reach."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from reservoir.lab.errors import LabError
from reservoir.lab.netns import exec_argv, ns_run
from reservoir.lab.peers import reservoir_command, stop_process

__all__ = ["add_tap", "serving_target"]

READY_TIMEOUT = 30.0  # s for the target to say it serves


def add_tap(ns: str, name: str, address: str | None = None) -> None:
    """Adds tap ``name`` in namespace ``ns``, up, with ``address`` (CIDR) if given."""
    ns_run(ns, ["ip", "tuntap", "add", "dev", name, "mode", "tap"], f"ip tuntap add {name}")
    if address is not None:
        ns_run(ns, ["ip", "addr", "add", address, "dev", name], f"ip addr add {address}")
    ns_run(ns, ["ip", "link", "set", name, "up"], f"ip link set {name} up")


@contextmanager
def serving_target(
    ns: str, args: Sequence[str], log: Path, timeout: float = READY_TIMEOUT
) -> Iterator[subprocess.Popen[bytes]]:
    """``reservoir target serve ARGS`` in namespace ``ns``, logging to ``log``, once it
    said it is ready (LabError with the log's tail if it ends or is silent first);
    stopped on exit."""
    argv = exec_argv(ns, [*reservoir_command(), "target", "serve", *args])
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while "ready:" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise LabError(f"the target did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield proc
    finally:
        stop_process(proc)
