"""The volumes of an agent, and the rule that a copy touches nothing else.

An agent's volumes are the LUNs of its builtin target (``target_config``) and the
files or block devices its settings list in ``source_volumes``. A copy's local
sides (a source or destination that is not an ``iscsi://`` URL) must reach one of
them: the comparison is by what a path reaches (:func:`volume_identity`: the file's
device and inode, or the block device's number), so a symlink or ``/x/../x`` names
the volume it leads to, and a path that does not exist is refused (the agent never
creates a file). A read-only LUN may be a source, never a destination. ``iscsi://``
endpoints are other targets, which enforce their own ACLs.

Each volume's device identifier is ``naa.`` and the 32 hex digits of the NAA the
builtin target reports in INQUIRY VPD 0x83 for a LUN backed by the same path.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fastapi import status

from reservoir.agent.control.errors import ControlError
from reservoir.agent.control.models import AgentVolumePublic
from reservoir.agent.scsi import derive_naa
from reservoir.agent.storage import volume_identity
from reservoir.agent.target.config import TargetConfig

__all__ = ["ISCSI_SCHEME", "Volume", "VolumeRefusedError", "Volumes", "device_id"]

ISCSI_SCHEME = "iscsi://"


class VolumeRefusedError(ControlError):
    """A copy names a local path that is not one of the agent's volumes, or writes a
    read-only one; the message names the path."""

    status_code = status.HTTP_403_FORBIDDEN
    code = "volume_refused"


def device_id(path: str | os.PathLike[str]) -> str:
    """``naa.<32 hex digits>`` of the volume ``path`` reaches; OSError if none."""
    return "naa." + derive_naa(volume_identity(path)).hex()


@dataclass(frozen=True, slots=True)
class Volume:
    """One configured volume: a source volume of the settings, or a LUN."""

    path: str
    kind: Literal["source", "lun"]
    read_only: bool = False
    iqn: str | None = None
    lun: int | None = None


def size_of(path: str) -> int:
    """Bytes of a file or block device; OSError if it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


def _missing(path: str, exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"{path} does not exist"
    return f"{path}: {exc.strerror or exc}"


def _describe(volume: Volume) -> AgentVolumePublic:
    size: int | None = None
    ident: str | None = None
    error: str | None = None
    try:
        ident = device_id(volume.path)
        size = size_of(volume.path)
    except OSError as exc:
        error = _missing(volume.path, exc)
    return AgentVolumePublic(
        path=volume.path,
        kind=volume.kind,
        size_bytes=size,
        device_id=ident,
        read_only=volume.read_only,
        iqn=volume.iqn,
        lun=volume.lun,
        error=error,
    )


class Volumes:
    """What an agent may read and write."""

    def __init__(self, sources: Sequence[Path], target: TargetConfig | None) -> None:
        self.volumes = [Volume(str(p), "source") for p in sources]
        for t in target.targets if target is not None else ():
            self.volumes += [
                Volume(lun.path, "lun", lun.read_only, t.iqn, lun.id) for lun in t.luns
            ]

    def describe(self) -> list[AgentVolumePublic]:
        """Every volume with its size and device id; one that cannot be opened says why
        in ``error`` instead."""
        return [_describe(v) for v in self.volumes]

    def check_copy(self, source: str, dests: Sequence[str]) -> None:
        """Raises :class:`VolumeRefusedError` unless every local side is a volume (and
        every local destination a writable one)."""
        self._check(source, write=False)
        for dest in dests:
            self._check(dest, write=True)

    def _check(self, location: str, *, write: bool) -> None:
        if location.startswith(ISCSI_SCHEME):
            return
        try:
            wanted = volume_identity(location)
        except OSError as exc:
            raise VolumeRefusedError(
                f"{location} is not one of this agent's volumes ({_missing(location, exc)})"
            ) from None
        matches = [v for v in self.volumes if self._identity(v) == wanted]
        if not matches:
            raise VolumeRefusedError(
                f"{location} is not one of this agent's volumes (the LUNs of its target "
                "and its source_volumes)"
            )
        if write and all(v.read_only for v in matches):
            raise VolumeRefusedError(
                f"{location} is a read-only LUN of this agent: a source, never a destination"
            )

    @staticmethod
    def _identity(volume: Volume) -> bytes | None:
        try:
            return volume_identity(volume.path)
        except OSError:
            return None
