"""Unit attention conditions, kept per I_T nexus (SAM-5 "Unit attention condition").

A condition is reported once, on the next command from that nexus other than
INQUIRY, REPORT LUNS and REQUEST SENSE (which returns it as sense data instead).
Conditions established by this package:

* first command of an I_T nexus the LU has not seen (or saw and lost): 29/00
  POWER ON, RESET, OR BUS DEVICE RESET OCCURRED, when ``on_new_nexus`` (default).
  libiscsi and the Linux initiator consume it at login, so it costs no
  conformance, and it tells initiators a restarted target lost SPC-2 reservations;
* LOGICAL UNIT RESET: 29/03 for every nexus, the requesting one included;
  TARGET WARM/COLD RESET: 29/00 for every nexus;
* MODE SELECT changing a parameter: 2A/01 for the other nexuses;
* persistent reservations: 2A/03 (CLEAR), 2A/04 (release of a registrants-only
  or all-registrants reservation), 2A/05 (registrations removed by PREEMPT);
* a capacity change noticed by ``LogicalUnit.capacity_changed``: 2A/09.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._sense import POWER_ON_RESET
from ._types import Nexus

MAX_PENDING = 8


class UnitAttentions:
    """Pending unit attention conditions of one logical unit."""

    __slots__ = ("on_new_nexus", "pending", "seen")

    def __init__(self, *, on_new_nexus: bool = True) -> None:
        self.on_new_nexus = on_new_nexus
        self.pending: dict[Nexus, list[tuple[int, int]]] = {}
        self.seen: set[Nexus] = set()

    def first_contact(self, nexus: Nexus) -> None:
        """Records a nexus seen for the first time (or again after it was lost)."""
        self.seen.add(nexus)
        if self.on_new_nexus:
            queue = self.pending.setdefault(nexus, [])
            if POWER_ON_RESET not in queue:
                queue.insert(0, POWER_ON_RESET)

    def pop(self, nexus: Nexus) -> tuple[int, int] | None:
        """The oldest condition pending for ``nexus``, which is then cleared."""
        queue = self.pending.get(nexus)
        if not queue:
            return None
        code = queue.pop(0)
        if not queue:
            del self.pending[nexus]
        return code

    def establish(
        self,
        code: tuple[int, int],
        *,
        targets: Iterable[Nexus] | None = None,
        exclude: Nexus | None = None,
    ) -> None:
        """Queues ``code`` for ``targets`` (default: every nexus seen) but ``exclude``."""
        for nexus in list(self.seen if targets is None else targets):
            if nexus == exclude:
                continue
            queue = self.pending.setdefault(nexus, [])
            if code not in queue and len(queue) < MAX_PENDING:
                queue.append(code)

    def forget(self, nexus: Nexus) -> None:
        """The nexus is gone: drop its conditions; it is new again if it returns."""
        self.seen.discard(nexus)
        self.pending.pop(nexus, None)
