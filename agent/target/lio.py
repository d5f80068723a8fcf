"""LIO, the Linux kernel's iSCSI target, as a backend of ``reservoir target``: the
TOML that configures the builtin target provisions LIO through rtslib-fb instead.

Each ``[[target]]`` becomes an iSCSI target with one portal group (tag 1) on the
file's portals; each ``[[target.lun]]`` a backstore (``fileio`` for a regular file,
``block`` for a block device) named ``rsv-<alias or iqn tail>-<lun>`` and a LUN of
that id. Who may log in maps as the builtin target reads it:

- ``allow`` -> one node ACL per initiator name, each LUN mapped to it (write
  protected where ``read_only``), with ``chap``/``mutual_chap`` on each ACL;
- ``chap`` without ``allow`` -> any initiator that passes CHAP (LIO's generated
  ACLs, with the portal group's CHAP credentials);
- ``open = true`` -> every initiator, no CHAP (generated ACLs, authentication off).

``direct = true`` (O_DIRECT in the builtin target) maps to a fileio backstore
without LIO's write cache (writes reach the file before they complete, O_DSYNC);
otherwise fileio caches writes and SYNCHRONIZE CACHE flushes them, like ours.
``bulk_writes`` has no LIO equivalent (fileio caches all writes or none): LIO
caches them, as the builtin target does with ``bulk_writes = "cached"``.

:func:`apply` first removes what an earlier apply of the same file made (targets of
its names, backstores of its names), so applying twice gives one configuration; a
failure part way removes what it made. Other targets and backstores in LIO are left
alone. :func:`save` and :func:`restore` write and read rtslib's saveconfig JSON
(``targetcli saveconfig``), by default the file LIO's service restores at boot.
"""

from __future__ import annotations

import importlib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reservoir.agent.target.config import Lun, Target, TargetConfig, format_portal
from reservoir.agent.target.errors import TargetError

__all__ = ["LioError", "LioReport", "apply", "backstore_name", "clear", "restore", "save"]

TPG_TAG = 1
# where LIO keeps persistent reservations and ALUA state (its "dbroot"): rtslib-fb
# moves it there from /var/target and refuses if the folder is missing, and LIO fails
# every PERSISTENT RESERVE OUT (NOT READY, LOGICAL UNIT COMMUNICATION FAILURE) where
# pr/ is missing, as it writes the reservations' file even when they do not persist
DBROOT = Path("/etc/target")
DBROOT_FOLDERS = ("pr", "alua")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class LioError(TargetError):
    """LIO cannot be reached, or cannot take the configuration; the message says why."""


@dataclass
class LioReport:
    """What an apply made, for the command's output (never a secret)."""

    targets: list[str] = field(default_factory=list)
    portals: list[str] = field(default_factory=list)
    backstores: list[str] = field(default_factory=list)  # "fileio rsv-vol1-0 /srv/vol1.img"
    access: list[str] = field(default_factory=list)  # one line per target
    saved: str = ""


def _rtslib() -> Any:
    """rtslib-fb, and LIO under it (configfs with the target modules)."""
    try:
        rtslib = importlib.import_module("rtslib_fb")
    except ImportError as exc:
        raise LioError(
            "rtslib-fb is not installed (pip install 'reservoir[lio]', or Debian's "
            "python3-rtslib-fb)"
        ) from exc
    try:
        for folder in DBROOT_FOLDERS:
            (DBROOT / folder).mkdir(mode=0o755, parents=True, exist_ok=True)
        rtslib.RTSRoot()
    except Exception as exc:  # rtslib raises its own errors and OSError alike
        raise LioError(
            f"LIO is not available here: {exc} (it needs root, configfs mounted on "
            "/sys/kernel/config and the target_core_mod and iscsi_target_mod modules)"
        ) from exc
    return rtslib


def backstore_name(target: Target, lun: Lun) -> str:
    """The backstore a LUN of ``target`` gets: ``rsv-<alias or iqn tail>-<lun id>``."""
    tail = target.alias or target.iqn.rsplit(":", 1)[-1]
    return f"rsv-{_UNSAFE.sub('_', tail)}-{lun.id}"


def apply(config: TargetConfig, save_file: Path | None = None, *, saving: bool = True) -> LioReport:
    """Provisions ``config`` in LIO (replacing what an earlier apply of it made) and,
    with ``saving``, saves LIO's whole configuration to ``save_file`` (rtslib's
    default where None)."""
    rtslib = _rtslib()
    _check_luns(config)
    clear(config)
    report = LioReport(portals=[format_portal(h, p) for h, p in config.portals])
    try:
        fabric = rtslib.FabricModule("iscsi")
        for target in config.targets:
            _provision(rtslib, fabric, config, target, report)
    except LioError:
        clear(config)
        raise
    except Exception as exc:
        clear(config)
        raise LioError(f"LIO refused the configuration: {exc}") from exc
    if saving:
        report.saved = save(save_file)
    return report


def _check_luns(config: TargetConfig) -> None:
    """Refuses, before anything changes, a LUN LIO could not back or serve as asked."""
    for target in config.targets:
        for lun in target.luns:
            try:
                mode = os.stat(lun.path).st_mode
            except OSError as exc:
                raise LioError(f"{target.iqn} LUN {lun.id}: {lun.path}: {exc.strerror}") from exc
            if not (stat.S_ISREG(mode) or stat.S_ISBLK(mode)):
                raise LioError(
                    f"{target.iqn} LUN {lun.id}: {lun.path} is neither a file nor a block device"
                )
        modes = {lun.read_only for lun in target.luns}
        if (target.open or not target.allow) and len(modes) > 1:
            raise LioError(
                f"{target.iqn}: LIO write-protects the LUNs of a target without an allow "
                "list all or none; give read-only and read-write LUNs separate targets"
            )


def _provision(
    rtslib: Any, fabric: Any, config: TargetConfig, target: Target, report: LioReport
) -> None:
    node = rtslib.Target(fabric, target.iqn, mode="create")
    tpg = rtslib.TPG(node, TPG_TAG, mode="create")
    for host, port in config.portals:
        rtslib.NetworkPortal(tpg, host, port, mode="create")
    luns = {}
    for lun in target.luns:
        backstore = _backstore(rtslib, target, lun, report)
        luns[lun.id] = rtslib.LUN(tpg, lun=lun.id, storage_object=backstore)
    report.access.append(f"{target.iqn}: {_grant(rtslib, tpg, target, luns)}")
    tpg.enable = True
    report.targets.append(target.iqn)


def _backstore(rtslib: Any, target: Target, lun: Lun, report: LioReport) -> Any:
    name = backstore_name(target, lun)
    found = os.stat(lun.path)
    if stat.S_ISBLK(found.st_mode):
        report.backstores.append(f"block {name} {lun.path}")
        return rtslib.BlockStorageObject(name, dev=lun.path, readonly=lun.read_only)
    report.backstores.append(f"fileio {name} {lun.path}")
    size = found.st_size
    return rtslib.FileIOStorageObject(name, dev=lun.path, size=size, write_back=not lun.direct)


def _grant(rtslib: Any, tpg: Any, target: Target, luns: dict[int, Any]) -> str:
    """Sets who may log in to ``tpg``; the line that says so."""
    read_only = all(lun.read_only for lun in target.luns) and bool(target.luns)
    if target.allow:
        tpg.set_attribute("authentication", "1" if target.chap else "0")
        for name in target.allow:
            acl = rtslib.NodeACL(tpg, name, mode="create")
            _set_chap(acl, target)
            for lun in target.luns:
                rtslib.MappedLUN(acl, lun.id, luns[lun.id], write_protect=lun.read_only)
        how = " with CHAP" if target.chap else ""
        return f"the initiators {', '.join(target.allow)}{how}"
    tpg.set_attribute("generate_node_acls", "1")
    tpg.set_attribute("cache_dynamic_acls", "1")
    tpg.set_attribute("demo_mode_write_protect", "1" if read_only else "0")
    if target.open:
        tpg.set_attribute("authentication", "0")
        return "every initiator, without CHAP (open)"
    tpg.set_attribute("authentication", "1")
    _set_chap(tpg, target)
    return "any initiator that passes CHAP"


def _set_chap(node: Any, target: Target) -> None:
    if target.chap is not None:
        node.chap_userid, node.chap_password = target.chap.user, target.chap.secret
    if target.mutual_chap is not None:
        node.chap_mutual_userid = target.mutual_chap.user
        node.chap_mutual_password = target.mutual_chap.secret


def clear(config: TargetConfig) -> list[str]:
    """Removes the targets of ``config``'s names and the backstores its LUNs would get
    from LIO; the names removed."""
    rtslib = _rtslib()
    root = rtslib.RTSRoot()
    names = {t.iqn for t in config.targets}
    stores = {backstore_name(t, lun) for t in config.targets for lun in t.luns}
    removed = []
    for node in list(root.targets):
        if node.wwn in names:
            node.delete()
            removed.append(node.wwn)
    for store in list(root.storage_objects):
        if store.name in stores:
            store.delete()
            removed.append(f"{store.plugin} {store.name}")
    return removed


def save(save_file: Path | None = None) -> str:
    """Writes LIO's whole configuration (rtslib's saveconfig JSON, mode 0600); the path."""
    rtslib = _rtslib()
    path = save_file or Path(rtslib.root.default_save_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        rtslib.RTSRoot().save_to_file(str(path))
    except Exception as exc:
        raise LioError(f"could not save LIO's configuration to {path}: {exc}") from exc
    return str(path)


def restore(save_file: Path | None = None, *, clear_existing: bool = False) -> list[str]:
    """Restores a saved configuration; refused where a target or backstore of it exists
    already, unless ``clear_existing`` (which removes everything in LIO first, as
    ``targetcli restoreconfig clear_existing=true``). The non-fatal errors."""
    rtslib = _rtslib()
    path = save_file or Path(rtslib.root.default_save_file)
    if not path.is_file():
        raise LioError(f"no saved LIO configuration at {path}")
    try:
        errors = rtslib.RTSRoot().restore_from_file(
            str(path), clear_existing=clear_existing, abort_on_error=True
        )
    except Exception as exc:
        raise LioError(f"could not restore LIO's configuration from {path}: {exc}") from exc
    return [str(e) for e in errors or []]
