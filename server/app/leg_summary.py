"""What a completed leg's copy summary (the agent's ``CopySummary``, kept as JSON in
the leg) says of the data: whether and how the destination was verified, and when it
was not held. The scheduler's leg events and ``reservoir transfer status`` say it in
the same words."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["hold_lapses", "lapse_warning", "verified_words"]

Summary = Mapping[str, Any]


def verified_words(summary: Summary | None) -> str:
    """``verified (storage)``, ``verified (receipt)``, ``not verified``; ``""`` for a
    leg with no summary yet."""
    if not summary:
        return ""
    if not summary.get("verified"):
        return "not verified"
    mode = summary.get("mode") or ""
    return f"verified ({mode})" if mode else "verified"


def hold_lapses(summary: Summary | None) -> list[str]:
    """The spans its destination was not held while the copy wrote it, in the agent's
    words (empty: held throughout, or not held at all)."""
    lapses = (summary or {}).get("hold_lapses") or []
    return [str(lapse) for lapse in lapses]


def lapse_warning(summary: Summary | None) -> str:
    """One sentence for the lapses (``""`` without any): what they were, what they mean
    for another initiator's writes, and what the end check did about them."""
    lapses = hold_lapses(summary)
    if not lapses:
        return ""
    after = " (the end check hashed all of it after)" if summary and summary.get("verified") else ""
    return f"{'; '.join(lapses)}: other initiators could write the destination then{after}"
