"""422 answers that say where and what, never what was sent.

FastAPI's own answer to a request that does not validate lists, for each error, the
``input`` (the value refused, up to the whole body when its shape is wrong: a token in
it included) and ``ctx``; a body of 50 MB came back whole, and a value that JSON cannot
encode (NaN) made the answer itself fail. Here each error is its location, message and
type only, long texts are cut, and at most :data:`MAX_ERRORS` errors are listed (the
``errors`` of the 422's problem, ``_problems.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MAX_ERRORS", "public_errors"]

MAX_ERRORS = 20
MAX_MESSAGE = 200  # characters of a message (a validator's may quote the value)
MAX_NAME = 64  # characters of one step of a location (a dict key is one)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _message(error: Mapping[str, Any]) -> str:
    msg = str(error.get("msg", ""))
    ctx = error.get("ctx")
    if error.get("type") == "json_invalid" and isinstance(ctx, Mapping) and "error" in ctx:
        msg = f"{msg}: {ctx['error']}"  # the decoder's reason, e.g. "Expecting value"
    return _cut(msg, MAX_MESSAGE)


def _loc(error: Mapping[str, Any]) -> list[str | int]:
    return [p if isinstance(p, int) else _cut(str(p), MAX_NAME) for p in error.get("loc", ())]


def public_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``loc``, ``msg`` and ``type`` of the first :data:`MAX_ERRORS` errors, and one
    more entry saying how many were left out."""
    listed: list[dict[str, Any]] = [
        {"loc": _loc(e), "msg": _message(e), "type": str(e.get("type", ""))}
        for e in errors[:MAX_ERRORS]
    ]
    if len(errors) > MAX_ERRORS:
        more = len(errors) - MAX_ERRORS
        listed.append({"loc": [], "msg": f"and {more} more errors", "type": "too_many_errors"})
    return listed
