"""A copy's hold on its destinations: one device once, and one copy at a time.

Before any write, every end of a copy is known by its device designator (INQUIRY VPD
0x83 for a LUN, the same designator derived from the file for a local path), so two
spellings of one LUN, or a source that backs its own destination, are refused.

Then each remote destination is held with a persistent reservation of type *Write
Exclusive - Registrants Only* under the copy's key: every stream's session registers
the key, and initiators that did not register cannot write the LUN until the copy
ends and clears the reservation. The key derives from the copy's ends and checkpoint
(:func:`hold_key`), so a resumed copy (another agent process, new sessions) registers
the same key and finds its reservation still there; a LUN reserved or registered
under another key is refused. A target without persistent reservations is written
unheld, with a warning.

The hold is claimed in the probe's round trip, not after it (:func:`claim`): the
session that probes registers and reserves while the LUN's reservations are read,
the other sessions that are in register, and those still logging in register as
soon as they are in (a cold copy's, mostly while the probe is out); the first write
then leaves one round trip after the copy was asked for on warm sessions, not two,
and a cold copy's streams may all write once the probe is answered. The claim is judged
against what was read (:func:`settle`), once the engine knows every end of the copy
is a device of its own: a LUN someone else holds or registered on is refused as
before. A copy refused then, or by the engine's own checks (two ends one device, a
destination too small, no checkpoint to resume), takes its claim back
(:func:`unclaim`), so nothing of a refused copy stays on the LUN.

SPC lets every registered I_T nexus write under that reservation, but some targets
let only the nexus that reserved write: LIO treats the other sessions of an initiator
name (other ISIDs) as unregistered while one of them holds the reservation. So the
first session that writes without being the holder first tries a write that cannot
change the LUN (:func:`writes_allowed`); where that conflicts, the holder releases the
reservation and the registrations stay (:func:`hold_by_registration`): the LUN is then
held by registration only, which keeps other Reservoir copies out (they refuse a LUN
with another key registered) but not other initiators, and the copy says so. Such a
target also lets only the holder release, so a copy resumed by another process while
its reservation is still there cannot go on (:func:`holder_gone`); that is only the
case for a run stopped between reserving and finding out, milliseconds apart.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from reservoir.agent.initiator import (
    WRITE_EXCLUSIVE_REGISTRANTS_ONLY,
    InitiatorError,
    ScsiError,
    Session,
    pr_clear,
    pr_read_keys,
    pr_read_reservation,
    pr_register,
    pr_release,
    pr_reserve,
    pr_unregister,
)
from reservoir.agent.transfer._errors import CopyError

log = logging.getLogger("reservoir.copy")

ILLEGAL_REQUEST, MISCOMPARE = 0x5, 0xE  # sense keys
RESERVATION_CONFLICT = 0x18  # status
COMPARE_AND_WRITE = 0x89
RESERVED, REGISTERED = "reservation", "registration"  # how a LUN is held


class HoldError(CopyError):
    """An end of a copy is the same device as another, or held by someone else."""


def hold_key(source: str, dests: Sequence[str], checkpoint: Path | None = None) -> int:
    """The copy's reservation key (nonzero): 8 bytes of a hash of its ends as given and
    of its checkpoint file where one is named, so a resumed run has the same key and
    another copy another (an agent names a checkpoint per copy)."""
    where = "" if checkpoint is None else str(checkpoint.resolve())
    text = "\n".join(["reservoir-hold", source, *dests, where])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") or 1


@dataclass(frozen=True)
class PrState:
    """What a LUN's persistent reservations are, as read before the copy holds it."""

    supported: bool = True
    reservation: tuple[int, int] | None = None  # (key, type)
    keys: list[int] = field(default_factory=list)


async def read_pr_state(session: Session, lun: int) -> PrState:
    """Both reads at once (one round trip)."""
    try:
        reservation, keys = await asyncio.gather(
            pr_read_reservation(session, lun), pr_read_keys(session, lun)
        )
    except ScsiError as exc:
        if exc.sense_key == ILLEGAL_REQUEST:
            return PrState(supported=False)
        raise
    return PrState(reservation=reservation, keys=keys)


def check_free(state: PrState, key: int, label: str) -> bool:
    """Whether the LUN is already held by this copy (a resume); HoldError if someone
    else holds it or has registered on it."""
    if state.reservation is not None and state.reservation[0] != key:
        holder, kind = state.reservation
        raise HoldError(
            f"{label} is reserved by another initiator (persistent reservation key "
            f"0x{holder:016x}, type {kind}); it may be another copy's destination"
        )
    others = sorted({k for k in state.keys if k != key})
    if others:
        listed = ", ".join(f"0x{k:016x}" for k in others)
        raise HoldError(
            f"{label} has persistent reservation registrations of other initiators "
            f"(keys {listed}), who could write it during the copy; clear them first"
        )
    return state.reservation == (key, WRITE_EXCLUSIVE_REGISTRANTS_ONLY)


async def register_and_reserve(session: Session, lun: int, key: int) -> bool:
    """REGISTER and RESERVE in one round trip: sent back to back on one session, which
    the target takes in command order; whether the session holds the reservation.
    Where the target ran the RESERVE first (it may run simple tasks side by side; or
    the REGISTER was sent again after a unit attention), the RESERVE found the session
    not yet registered (RESERVATION CONFLICT) and is sent again now that it is; one
    that conflicts then is held by another nexus (False)."""
    registered, reserved = await asyncio.gather(
        pr_register(session, lun, key),
        pr_reserve(session, lun, key, WRITE_EXCLUSIVE_REGISTRANTS_ONLY),
        return_exceptions=True,
    )
    if isinstance(registered, BaseException):
        raise registered
    if isinstance(reserved, ScsiError) and reserved.status == RESERVATION_CONFLICT:
        try:
            await pr_reserve(session, lun, key, WRITE_EXCLUSIVE_REGISTRANTS_ONLY)
        except ScsiError as exc:
            if exc.status == RESERVATION_CONFLICT:
                return False
            raise
    elif isinstance(reserved, BaseException):
        raise reserved
    return True


async def claim(session: Session, lun: int, key: int) -> bool | None:
    """Registers ``session`` under ``key`` and reserves the LUN, sent beside the probe
    that reads the LUN's reservations (:func:`settle` judges the two together, and
    :func:`unclaim` takes the claim back where the copy is refused): True if the session
    now holds the reservation; False if another I_T nexus holds one (the earlier run of
    a resumed copy, or someone else); None if the target has no persistent reservations."""
    try:
        return await register_and_reserve(session, lun, key)
    except ScsiError as exc:
        if exc.sense_key == ILLEGAL_REQUEST:
            return None
        raise


def settle(state: PrState, key: int, reserved: bool, label: str) -> bool:
    """Whether the LUN was this copy's before its claim (a resumed copy: the earlier
    run's nexus holds the reservation, ``reserved`` False), from its reservations as
    read beside the claim, before or after it (a target may run the two side by side);
    HoldError where another initiator holds the LUN or registered on it."""
    if reserved and state.reservation is not None and state.reservation[0] == key:
        state = replace(state, reservation=None)  # the read saw the claim's own reservation
    resumed = check_free(state, key, label)
    if not reserved and not resumed:  # reserved by someone after the read
        raise HoldError(
            f"{label} is reserved by another initiator; it may be another copy's destination"
        )
    return resumed


async def unclaim(sessions: Sequence[Session], holder: Session | None, lun: int) -> list[Session]:
    """Takes back a claim of a copy refused before its first write: the registrations
    of ``sessions`` go, the holder's last (its reservation goes with it, and nobody is
    left registered to be told); the sessions whose registration went. A resumed copy
    has no holder of its own: the earlier run's registration and reservation stay."""
    others = [s for s in sessions if s is not holder]
    answers: list[BaseException | None] = list(
        await asyncio.gather(*(pr_unregister(s, lun) for s in others), return_exceptions=True)
    )
    done = [s for s, answer in zip(others, answers, strict=True) if answer is None]
    if holder is not None and holder in sessions:
        try:
            await pr_unregister(holder, lun)
            done.append(holder)
        except (InitiatorError, OSError, TimeoutError) as exc:
            answers.append(exc)
    failed = [a for a in answers if a is not None]
    if failed:
        log.warning("the hold of a refused copy could not all be taken back: %s", failed[0])
    return done


def check_distinct(ends: Sequence[tuple[str, str | None]]) -> None:
    """HoldError if two ends of a copy (spelling, device) are one device."""
    seen: dict[str, str] = {}
    for spelling, device in ends:
        if device is None:
            continue
        if device in seen:
            raise HoldError(
                f"{seen[device]} and {spelling} are the same device ({device}); "
                "a copy reads and writes each device once"
            )
        seen[device] = spelling


async def give_back(session: Session, lun: int, key: int, label: str) -> bool:
    """Clears the LUN's reservation if ``key`` holds it (a copy that will not run
    again: cancelled); False if the copy did not hold it."""
    state = await read_pr_state(session, lun)
    if not state.supported or state.reservation is None or state.reservation[0] != key:
        return False
    await pr_register(session, lun, key)
    await pr_clear(session, lun, key)
    log.info("%s released (reservation key 0x%016x)", label, key)
    return True


async def writes_allowed(session: Session, lun: int, block_size: int) -> bool:
    """Whether ``session`` may write the held LUN, asked with a write that cannot
    change it: COMPARE AND WRITE of block 0 whose compare and write halves are the same
    zeros, so the block is either rewritten with what it held or left (MISCOMPARE). An
    empty write would not do: the target sees no data going out and lets it pass. A
    target without COMPARE AND WRITE is taken to follow SPC."""
    cdb = struct.pack(">BBQ3xBBB", COMPARE_AND_WRITE, 0, 0, 1, 0, 0)
    try:
        await session.scsi(lun, cdb, data_out=bytes(2 * block_size))
    except ScsiError as exc:
        if exc.status == RESERVATION_CONFLICT:
            return False
        if exc.sense_key == MISCOMPARE:
            return True
        if exc.sense_key == ILLEGAL_REQUEST:
            log.debug("no COMPARE AND WRITE: sessions are taken to write under the hold")
            return True
        raise
    return True


async def hold_by_registration(holder: Session, lun: int, key: int, label: str) -> None:
    """Releases the copy's reservation from the session that holds it (the only one
    such a target lets release it); every registration stays."""
    await pr_release(holder, lun, key, WRITE_EXCLUSIVE_REGISTRANTS_ONLY)
    log.warning(
        "%s: the target lets only the session that reserved it write, not the copy's "
        "other sessions; the reservation is released and the LUN is held by registration "
        "only (key 0x%016x): other Reservoir copies are refused, other initiators are not",
        label,
        key,
    )


def holder_gone(label: str, key: int) -> HoldError:
    """The error for a LUN such a target keeps reserved for a session that is gone."""
    return HoldError(
        f"{label} is reserved under this copy's key (0x{key:016x}) for a session of an "
        "earlier run, and the target lets only that session write or release it; clear "
        "the reservation on the target (LIO: targetcli, or a restart of the LUN's "
        "backstore) and resume"
    )
