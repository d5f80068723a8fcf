"""Reservation state and the RESERVATION CONFLICT rules.

Two mechanisms coexist: SPC-2 RESERVE/RELEASE (one holder, dropped on reset
and I_T nexus loss) and SPC-4 persistent reservations (5.12), keyed by I_T
nexus and kept across resets and nexus loss. :meth:`Reservations.conflicts` is
only consulted while :attr:`Reservations.active` is set, so the fast path pays
a single attribute test when no reservation exists.
"""

from __future__ import annotations

from typing import Final

from . import _cdb as op
from ._types import Nexus

# Persistent reservation types (SPC-4 table 171).
WRITE_EXCLUSIVE: Final = 1
EXCLUSIVE_ACCESS: Final = 3
WRITE_EXCLUSIVE_REGISTRANTS_ONLY: Final = 5
EXCLUSIVE_ACCESS_REGISTRANTS_ONLY: Final = 6
WRITE_EXCLUSIVE_ALL_REGISTRANTS: Final = 7
EXCLUSIVE_ACCESS_ALL_REGISTRANTS: Final = 8
PR_TYPES: Final = frozenset({1, 3, 5, 6, 7, 8})
ALL_REGISTRANTS: Final = frozenset({7, 8})
REGISTRANTS_ONLY: Final = frozenset({5, 6})
EXCLUSIVE_ACCESS_TYPES: Final = frozenset({3, 6, 8})

# Commands a non-holder may always run (SPC-4 table 63, SBC-3 table 13).
_ALWAYS_ALLOWED: Final = frozenset(
    {
        op.TEST_UNIT_READY,
        op.REQUEST_SENSE,
        op.INQUIRY,
        op.LOG_SENSE,
        op.READ_CAPACITY_10,
        op.PERSISTENT_RESERVE_IN,
        op.PERSISTENT_RESERVE_OUT,
        op.REPORT_LUNS,
        op.MAINTENANCE_IN,
    }
)
# Commands that only read: allowed under Write Exclusive, conflicting under Exclusive Access.
_READS: Final = frozenset(
    {
        op.READ_6,
        op.READ_10,
        op.READ_12,
        op.READ_16,
        op.VERIFY_10,
        op.VERIFY_12,
        op.VERIFY_16,
        op.PRE_FETCH_10,
        op.PRE_FETCH_16,
        op.SYNCHRONIZE_CACHE_10,
        op.SYNCHRONIZE_CACHE_16,
        op.MODE_SENSE_6,
        op.MODE_SENSE_10,
        op.SERVICE_ACTION_IN_16,
        op.HASH_RANGE,
    }
)
# What a non-holder may run under an SPC-2 reservation (SPC-2 5.5.1).
_SPC2_ALLOWED: Final = frozenset(
    {op.INQUIRY, op.REQUEST_SENSE, op.REPORT_LUNS, op.RELEASE_6, op.RELEASE_10}
)


class Reservations:
    """SPC-2 and persistent reservation state of one logical unit."""

    __slots__ = ("active", "generation", "pr_holder", "pr_type", "registrations", "spc2_holder")

    def __init__(self) -> None:
        self.spc2_holder: Nexus | None = None
        self.registrations: dict[Nexus, int] = {}
        self.pr_holder: Nexus | None = None
        self.pr_type = 0
        self.generation = 0
        self.active = False

    def update(self) -> None:
        """Recomputes :attr:`active` after any change."""
        self.active = self.spc2_holder is not None or self.pr_type != 0

    # -- persistent reservation queries -------------------------------------------

    def is_holder(self, nexus: Nexus) -> bool:
        """SPC-4 5.12.10: every registrant holds an all registrants reservation."""
        if self.pr_type in ALL_REGISTRANTS:
            return nexus in self.registrations
        return self.pr_type != 0 and nexus == self.pr_holder

    def reservation_key(self) -> int:
        """The key READ RESERVATION reports (zero for all registrants types)."""
        if self.pr_type in ALL_REGISTRANTS or self.pr_holder is None:
            return 0
        return self.registrations.get(self.pr_holder, 0)

    def set_reservation(self, holder: Nexus | None, pr_type: int) -> None:
        self.pr_holder = holder
        self.pr_type = pr_type
        self.update()

    def clear_reservation(self) -> None:
        self.set_reservation(None, 0)

    # -- access checks --------------------------------------------------------------

    def conflicts(self, nexus: Nexus, cdb: bytes) -> bool:
        """True when ``cdb`` from ``nexus`` must end with RESERVATION CONFLICT."""
        opcode = cdb[0]
        if self.spc2_holder is not None:
            return nexus != self.spc2_holder and opcode not in _SPC2_ALLOWED
        pr_type = self.pr_type
        if pr_type == 0:
            return False
        if pr_type in ALL_REGISTRANTS or pr_type in REGISTRANTS_ONLY:
            # Registrants have full access; the holder is always a registrant.
            if nexus in self.registrations:
                return False
        elif nexus == self.pr_holder:
            return False
        return _non_holder_conflict(pr_type, cdb)


def _non_holder_conflict(pr_type: int, cdb: bytes) -> bool:
    opcode = cdb[0]
    if opcode in _ALWAYS_ALLOWED:
        return False
    if opcode == op.SERVICE_ACTION_IN_16 and (cdb[1] & 0x1F) == op.SA_READ_CAPACITY_16:
        return False
    if opcode == op.START_STOP_UNIT:
        return not (len(cdb) > 4 and cdb[4] & 0xF1 == 0x01)
    if opcode == op.PREVENT_ALLOW_MEDIUM_REMOVAL:
        return len(cdb) > 4 and cdb[4] & 0x03 != 0
    if opcode in _READS:
        return pr_type in EXCLUSIVE_ACCESS_TYPES
    return True
