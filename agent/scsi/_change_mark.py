"""The Reservoir change mark VPD page (INQUIRY EVPD, page C0h, vendor specific): what
tells whether the logical unit's storage was written since an earlier reading.

A copy whose source is a LUN of our target reads it before its first read and at its
end; where the two differ, something wrote the source while it was copied (see
reservoir.agent.storage._changes: the backing file's times, or a block device's
write counters and node times, which every write moves, the target's own included).

Page layout (after the 4-byte VPD header)::

    bytes 0-15   SIGNATURE: "RESERVOIR-CHMARK" (another vendor's page C0h is not ours)
    bytes 16-    UTF-8: how the storage is watched, a line feed, its current state

The state is opaque: marks are compared, never interpreted.
"""

from __future__ import annotations

from typing import Final

CHANGE_MARK_PAGE: Final = 0xC0
SIGNATURE: Final = b"RESERVOIR-CHMARK"


def encode_change_mark(how: str, state: str) -> bytes:
    """The page's payload for a mark."""
    return SIGNATURE + f"{how}\n{state}".encode()


def decode_change_mark(page: bytes) -> tuple[str, str] | None:
    """(how, state) from a whole page C0h, VPD header included; None where the page is
    not ours (another vendor's C0h, or cut short)."""
    if len(page) < 4 or page[1] != CHANGE_MARK_PAGE:
        return None
    payload = page[4 : 4 + int.from_bytes(page[2:4], "big")]
    if not payload.startswith(SIGNATURE):
        return None
    how, sep, state = payload[len(SIGNATURE) :].decode("utf-8", "replace").partition("\n")
    return (how, state) if sep and how else None
