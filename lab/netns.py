"""Network namespaces and the ``ip``/``tc``/``sysctl`` commands, with clear errors.

Every helper runs one command and raises :class:`LabError` naming the command
and its stderr when it fails, e.g. ``ip netns add failed: ...``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from reservoir.lab.errors import LabError

NETNS_DIR = Path("/run/netns")


def run(argv: Sequence[str], what: str | None = None, timeout: float = 30.0) -> str:
    """Run a command; its stdout, or LabError("<what> failed: <stderr>")."""
    label = what or " ".join(argv[:3])
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError as e:
        raise LabError(f"{label} failed: {argv[0]} is not installed") from e
    except subprocess.TimeoutExpired as e:
        raise LabError(f"{label} failed: no answer after {timeout} s") from e
    if proc.returncode != 0:
        detail = proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}"
        raise LabError(f"{label} failed: {detail}")
    return proc.stdout


def exec_argv(ns: str, argv: Sequence[str]) -> list[str]:
    """The command line that runs ``argv`` inside namespace ``ns``."""
    return ["ip", "netns", "exec", ns, *argv]


def ns_run(ns: str, argv: Sequence[str], what: str | None = None) -> str:
    return run(exec_argv(ns, argv), what or f"{' '.join(argv[:3])} in {ns}")


def add(ns: str) -> None:
    run(["ip", "netns", "add", ns], "ip netns add")
    ns_run(ns, ["ip", "link", "set", "lo", "up"], f"ip link set lo up in {ns}")


def delete(ns: str) -> None:
    """Delete a namespace (and the interfaces in it); nothing if already gone."""
    if exists(ns):
        run(["ip", "netns", "del", ns], "ip netns del")


def exists(ns: str) -> bool:
    return (NETNS_DIR / ns).exists()


def names() -> list[str]:
    """Every named namespace, as ``ip netns list`` shows them."""
    out = run(["ip", "netns", "list"], "ip netns list")
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def sysctl(ns: str, key: str, value: str) -> None:
    ns_run(ns, ["sysctl", "-qw", f"{key}={value}"], f"sysctl {key} in {ns}")


def can_create() -> str | None:
    """None if this process may create namespaces, else the reason it may not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    probe = f"rsvprobe{os.getpid()}"
    try:
        add(probe)
    except LabError as e:
        return str(e)
    delete(probe)
    return None


def has_qdisc(kind: str) -> bool:
    """Whether ``tc qdisc add dev X root <kind>`` works here (``kind`` may carry
    parameters, e.g. ``"netem delay 10ms"``), probed on a throwaway veth."""
    probe = f"rsvq{os.getpid()}"
    add(probe)
    try:
        ns_run(probe, ["ip", "link", "add", "p0", "type", "veth", "peer", "name", "p1"])
        try:
            ns_run(probe, ["tc", "qdisc", "add", "dev", "p0", "root", *kind.split()])
        except LabError:
            return False
        return True
    finally:
        delete(probe)
