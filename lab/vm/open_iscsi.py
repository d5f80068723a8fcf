"""open-iscsi driven in a guest: discovery, CHAP (one-way and mutual), digests,
login, the disk a session attached, logout.

Every step is an ``iscsiadm`` command line run by the guest's agent; its output is
kept in :attr:`OpenIscsi.log` (secrets masked), which the tests print as the session
log. The guest's initiator name is set before ``iscsid`` starts, so a target's log
can be matched against it.
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass, field

from reservoir.lab.errors import LabError
from reservoir.lab.vm.guest import Guest, Result

__all__ = ["Chap", "Node", "OpenIscsi"]

ATTACHED = re.compile(r"Attached scsi disk (sd[a-z]+)\s+State: running")


@dataclass(frozen=True, slots=True)
class Chap:
    user: str
    secret: str


@dataclass(frozen=True, slots=True)
class Node:
    """A target as open-iscsi records it, with how to log in to it."""

    iqn: str
    portal: str  # HOST:PORT
    chap: Chap | None = None
    mutual: Chap | None = None  # the target's name and secret, checked by the initiator
    digests: bool = False  # CRC32C header and data digests, required
    # seconds a broken session waits for its connection before failing its I/O up
    # (to dm-multipath: 120 by default), and the NOP-Out interval that notices it
    replacement_timeout: int | None = None


@dataclass
class OpenIscsi:
    guest: Guest
    initiator: str
    log: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)

    def run(self, argv: list[str], *, timeout: float = 60.0, check: bool = True) -> Result:
        """Runs ``argv`` in the guest and logs it with its output (secrets masked);
        LabError on a non-zero status when ``check``."""
        line = " ".join(shlex.quote(a) for a in argv)
        r = self.guest.run(argv, timeout=timeout)
        self.log.append(f"$ {self._mask(line)}  (exit {r.rc})")
        self.log.extend(f"  {self._mask(x)}" for x in (r.out + r.err).strip().splitlines())
        if check and r.rc != 0:
            detail = self._mask((r.err.strip() or r.out.strip())[-1500:])
            raise LabError(f"{self.guest.name}: {self._mask(line)}: exit {r.rc}: {detail}")
        return r

    def _mask(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "********")
        return text

    def start(self) -> None:
        """Loads iscsi_tcp and the disk driver, names the initiator, starts iscsid."""
        self.guest.check("modprobe -a iscsi_tcp sd_mod")  # no udev: nothing loads sd_mod
        self.guest.check(f"echo InitiatorName={self.initiator} > /etc/iscsi/initiatorname.iscsi")
        self.guest.check("iscsid </dev/null >/dev/null 2>&1")
        self.log.append(f"# iscsid started as {self.initiator}")

    def stop(self) -> None:
        """Logs every session out, forgets the nodes, stops iscsid (``iscsiadm -k``)."""
        self.guest.run("iscsiadm -m node --logoutall=all")
        self.guest.run("iscsiadm -m node -o delete")
        self.guest.run("iscsiadm -k 0")
        self.log.append("# iscsid stopped")

    def discover(self, portal: str) -> list[tuple[str, str]]:
        """SendTargets discovery: (portal, target name) of every record found."""
        out = self.run(["iscsiadm", "-m", "discovery", "-t", "sendtargets", "-p", portal]).out
        found = []
        for line in out.splitlines():
            address, _, iqn = line.strip().partition(" ")
            if iqn:
                found.append((address.split(",")[0], iqn))
        return found

    def _set(self, node: Node, key: str, value: str) -> None:
        self.run(
            ["iscsiadm", "-m", "node", "-T", node.iqn, "-p", node.portal,
             "-o", "update", "-n", key, "-v", value]
        )  # fmt: skip

    def configure(self, node: Node) -> None:
        """Writes the node's CHAP and digest settings into its record."""
        settings: list[tuple[str, str]] = []
        if node.chap is not None:
            self.secrets.append(node.chap.secret)
            settings += [
                ("node.session.auth.authmethod", "CHAP"),
                ("node.session.auth.username", node.chap.user),
                ("node.session.auth.password", node.chap.secret),
            ]
        if node.mutual is not None:
            self.secrets.append(node.mutual.secret)
            settings += [
                ("node.session.auth.username_in", node.mutual.user),
                ("node.session.auth.password_in", node.mutual.secret),
            ]
        if node.digests:
            settings += [
                ("node.conn[0].iscsi.HeaderDigest", "CRC32C"),
                ("node.conn[0].iscsi.DataDigest", "CRC32C"),
            ]
        if node.replacement_timeout is not None:
            settings += [
                ("node.session.timeo.replacement_timeout", str(node.replacement_timeout)),
                ("node.conn[0].timeo.noop_out_interval", "2"),
                ("node.conn[0].timeo.noop_out_timeout", "2"),
            ]
        for key, value in settings:
            self._set(node, key, value)

    def login(self, node: Node, *, check: bool = True) -> bool:
        """Logs in; whether it succeeded (raises on failure when ``check``)."""
        argv = ["iscsiadm", "-m", "node", "-T", node.iqn, "-p", node.portal, "--login"]
        r = self.run(argv, check=False)
        if check and r.rc != 0:
            raise LabError(f"login to {node.iqn} at {node.portal} failed: {r.err.strip()}")
        return r.rc == 0

    def logout(self, node: Node) -> None:
        self.run(["iscsiadm", "-m", "node", "-T", node.iqn, "-p", node.portal, "--logout"])

    def session(self, node: Node) -> dict[str, str]:
        """The negotiated parameters and attached disk of the session to ``node``
        (``iscsiadm -m session -P 3``): HeaderDigest, DataDigest, ..., ``disk``."""
        out = self.run(["iscsiadm", "-m", "session", "-P", "3"]).out
        for target in out.split("Target: ")[1:]:
            if target.split()[0] != node.iqn:
                continue
            for session in target.split("Current Portal: ")[1:]:  # a target's sessions
                if not session.startswith(f"{node.portal},"):
                    continue
                params = dict(re.findall(r"^\s*(\w+): (\S+)\s*$", session, re.M))
                disk = ATTACHED.search(session)
                if disk:
                    params["disk"] = f"/dev/{disk.group(1)}"
                return params
        raise LabError(f"no session to {node.iqn} at {node.portal}")

    def disk(self, node: Node, timeout: float = 60.0) -> str:
        """The disk (``/dev/sdX``) the session to ``node`` attached, once it has one."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.session(node).get("disk")
            if found is not None:
                self.guest.check(f"test -b {found}")
                return found
            if time.monotonic() > deadline:
                raise LabError(f"the session to {node.iqn} attached no disk in {timeout:.0f} s")
            time.sleep(1.0)
