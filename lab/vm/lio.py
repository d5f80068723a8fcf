"""LIO, the Linux kernel's target, set up in a guest through rtslib-fb (the library
targetcli is built on): the reference our target is compared with, since the same
initiator steps against both show which differences are ours.

:func:`serve_fileio` makes a file-backed LUN, an iSCSI target with it, an ACL for one
initiator with CHAP (and mutual CHAP), or open to every initiator, and a portal;
:func:`clear` removes it all.
The Python runs in the guest, fed on stdin to its ``python3``.
"""

from __future__ import annotations

import json

from reservoir.lab.vm.guest import Guest
from reservoir.lab.vm.open_iscsi import Chap

__all__ = ["clear", "serve_fileio"]

MODULES = ("target_core_mod", "target_core_file", "iscsi_target_mod")

SERVE = """
import json, sys
from rtslib_fb import (FabricModule, FileIOStorageObject, LUN, MappedLUN,
                       NetworkPortal, NodeACL, Target, TPG)
a = json.loads(sys.argv[1])
so = FileIOStorageObject(a["name"], dev=a["file"], size=a["size"])
tpg = TPG(Target(FabricModule("iscsi"), a["iqn"]), 1)
NetworkPortal(tpg, a["host"], a["port"])
lun = LUN(tpg, 0, so)
if a["initiator"]:
    acl = NodeACL(tpg, a["initiator"])
    MappedLUN(acl, 0, lun)
    acl.chap_userid, acl.chap_password = a["user"], a["secret"]
    if a.get("mutual_user"):
        acl.chap_mutual_userid, acl.chap_mutual_password = a["mutual_user"], a["mutual_secret"]
    tpg.set_attribute("authentication", "1")
    tpg.set_attribute("generate_node_acls", "0")
else:  # every initiator, no CHAP, writable (what a conformance suite needs)
    tpg.set_attribute("authentication", "0")
    tpg.set_attribute("generate_node_acls", "1")
    tpg.set_attribute("cache_dynamic_acls", "1")
    tpg.set_attribute("demo_mode_write_protect", "0")
tpg.enable = True
print("lio:", a["iqn"], "on", a["host"], a["port"])
"""

CLEAR = """
from rtslib_fb import RTSRoot
RTSRoot().clear_existing(confirm=True)
"""


def serve_fileio(
    guest: Guest,
    iqn: str,
    *,
    initiator: str | None,
    chap: Chap | None,
    mutual: Chap | None = None,
    size_bytes: int = 64 << 20,
    portal: str = "127.0.0.1:3260",
) -> str:
    """A file-backed LUN 0 of ``size_bytes`` on ``iqn`` for ``initiator`` with CHAP;
    for every initiator without CHAP when ``initiator`` is None. What rtslib said."""
    guest.check("modprobe -a " + " ".join(MODULES))
    # where LIO keeps persistent reservations made with APTPL (as reservoir copy's
    # hold does) and its ALUA state; the targetcli package's service makes them
    guest.check("mkdir -p /var/target/pr /var/target/alua /etc/target/pr /etc/target/alua")
    name = iqn.rsplit(":", 1)[-1]
    host, _, port = portal.rpartition(":")
    args = {
        "name": name,
        "file": f"/var/tmp/{name}.img",
        "size": size_bytes,
        "iqn": iqn,
        "host": host,
        "port": int(port),
        "initiator": initiator or "",
        "user": chap.user if chap else "",
        "secret": chap.secret if chap else "",
    }
    if mutual is not None:
        args |= {"mutual_user": mutual.user, "mutual_secret": mutual.secret}
    return guest.check(["python3", "-", json.dumps(args)], input=SERVE.encode())


def clear(guest: Guest) -> None:
    """Removes every LIO object."""
    guest.check(["python3", "-"], input=CLEAR.encode())
