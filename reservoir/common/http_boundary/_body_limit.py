"""Request bodies bounded before anything reads them: a body whose ``Content-Length``
is over the limit is refused before its first byte is read; a chunked one is counted as
it arrives and refused once it passes the limit. One limit for the whole app, larger
ones for named paths (an upload)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.types import Scope

from ._refusal import RefusedError

__all__ = ["BodyLimit", "BodyTooLargeError", "content_length"]


@dataclass(frozen=True)
class BodyLimit:
    """At most ``size`` bytes of body; ``setting`` names the setting that raises it."""

    size: int
    setting: str

    def message(self) -> str:
        return f"the request body is larger than {self.size} bytes (the setting {self.setting})"


class BodyTooLargeError(RefusedError):
    code = "body_too_large"

    def __init__(self, limit: BodyLimit) -> None:
        super().__init__(413, limit.message())


def content_length(scope: Scope) -> int | None:
    """The declared length of the body, or None (chunked, or none)."""
    try:
        return int(Headers(scope=scope)["content-length"])
    except (KeyError, ValueError):
        return None
