"""What the target counts of each served target, for the agent's metrics.

Every SCSI command a session of the target accepts counts once, by kind: ``read``
(READ), ``write`` (WRITE, WRITE AND VERIFY) or ``other`` (everything else: INQUIRY,
persistent reservations, HASH RANGE...). ``read_bytes`` adds up the Data-In of the
reads as it is sent, ``written_bytes`` the data of the writes that ended GOOD. Plain
integers, added to in the event loop's thread where :mod:`.full_feature` handles a
command (one list index or attribute addition, no lock).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from reservoir.agent import scsi

__all__ = ["KINDS", "OTHER", "READ", "WRITE", "TargetCounts", "kind_of"]

READ, WRITE, OTHER = 0, 1, 2
KINDS: Final = ("read", "write", "other")  # by index: READ, WRITE, OTHER
_KIND_OF: Final = bytes(
    READ if op in scsi.DATA_READS else WRITE if op in scsi.DATA_WRITES else OTHER
    for op in range(256)
)


def kind_of(cdb: bytes) -> int:
    """:data:`READ`, :data:`WRITE` or :data:`OTHER`: the kind of the command in ``cdb``."""
    return _KIND_OF[cdb[0]] if cdb else OTHER


@dataclass(slots=True)
class TargetCounts:
    """One target's commands by kind (indexed by :data:`READ`, :data:`WRITE`,
    :data:`OTHER`) and the bytes its reads sent and its writes wrote."""

    commands: list[int] = field(default_factory=lambda: [0, 0, 0])
    read_bytes: int = 0
    written_bytes: int = 0

    def by_kind(self) -> dict[str, int]:
        """The commands counted, by the name of their kind."""
        return dict(zip(KINDS, self.commands, strict=True))
