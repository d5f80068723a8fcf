"""One device, whatever names it: volumes compared by the device id their agent
reported (``naa.`` + the NAA of VPD 0x83), so a LUN registered under two names or two
portals, or a LUN and the file behind it, are one device.

- A volume set never holds one device twice (422 naming both members).
- A transfer never has one device on both sides (422 naming both members).
- A destination belongs to one transfer at a time: a transfer whose destination is
  written or read by a transfer that is not final (``completed``, ``cancelled``) is
  refused (409 naming that transfer); so is one whose destination another unfinished
  transfer reads as its source.

A volume registered before device ids were asked has none; it is only ever the same
device as itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from reservoir.server.app.errors import ConflictError, InvalidRequestError
from reservoir.server.app.models import TransferState
from reservoir.server.app.tables import AgentVolume, Transfer, VolumeSet

__all__ = ["FINAL_STATES", "check_distinct", "check_free", "check_transfer", "device", "label"]

FINAL_STATES = (TransferState.COMPLETED.value, TransferState.CANCELLED.value)


def device(volume: AgentVolume) -> str:
    """What ``volume`` is: its device id, or (without one) the volume itself."""
    return volume.device_id or f"volume #{volume.id}"


def label(volume: AgentVolume) -> str:
    return f"agent {volume.agent.name!r} volume {volume.name!r}"


def _first_twice(volumes: Sequence[AgentVolume]) -> tuple[int, int] | None:
    seen: dict[str, int] = {}
    for j, volume in enumerate(volumes):
        i = seen.setdefault(device(volume), j)
        if i != j:
            return i, j
    return None


def check_distinct(volumes: Sequence[AgentVolume]) -> None:
    """422 at the later member if two members of a set are one device."""
    twice = _first_twice(volumes)
    if twice is not None:
        i, j = twice
        raise InvalidRequestError(
            ("members", j),
            f"members {i} and {j} are one device ({device(volumes[j])}): "
            f"{label(volumes[i])} and {label(volumes[j])}",
        )


def check_transfer(source: VolumeSet, dest: VolumeSet) -> None:
    """422 if a device is both a source and a destination member."""
    sources = {device(m.volume): (i, m.volume) for i, m in enumerate(source.members)}
    for j, member in enumerate(dest.members):
        found = sources.get(device(member.volume))
        if found is not None:
            i, volume = found
            raise InvalidRequestError(
                ("destination",),
                f"source member {i} and destination member {j} are one device "
                f"({device(volume)}): {label(volume)} and {label(member.volume)}",
            )


def _devices(vset: VolumeSet) -> dict[str, AgentVolume]:
    return {device(m.volume): m.volume for m in vset.members}


def _unfinished(session: Session) -> Iterable[Transfer]:
    return session.scalars(
        select(Transfer).where(Transfer.state.not_in(FINAL_STATES)).order_by(Transfer.created_at)
    ).all()


def _set_name(session: Session, set_id: str) -> str | None:
    vset = session.get(VolumeSet, set_id)
    return None if vset is None else vset.name


def _describe(transfer: Transfer, session: Session) -> str:
    source = _set_name(session, transfer.source_set_id)
    dest = _set_name(session, transfer.dest_set_id)
    return f"transfer {transfer.id} ({transfer.state}, from {source!r} to {dest!r})"


def check_free(session: Session, dest: VolumeSet) -> None:
    """409 if a destination device is written or read by an unfinished transfer."""
    wanted = _devices(dest)
    for other in _unfinished(session):
        for role, vset_id in (("destination", other.dest_set_id), ("source", other.source_set_id)):
            vset = session.get(VolumeSet, vset_id)
            if vset is None:
                continue
            shared = sorted(wanted.keys() & _devices(vset).keys())
            if shared:
                volume = wanted[shared[0]]
                raise ConflictError(
                    f"the destination's {label(volume)} ({shared[0]}) is the {role} of "
                    f"{_describe(other, session)}: a destination belongs to one transfer "
                    "at a time (cancel that transfer, or wait until it completes)"
                )
