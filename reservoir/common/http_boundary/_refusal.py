"""The refusals of a request's body, raised from the ``receive`` the app reads the body
with: HTTP errors, so the app's own error handling answers them (FastAPI re-raises an
HTTP error met while it reads a body, where it would turn any other into a 400)."""

from __future__ import annotations

from typing import Any, ClassVar

from fastapi import HTTPException

__all__ = ["RefusedError"]


class RefusedError(HTTPException):
    """The request is answered ``status_code`` with ``detail``, as a problem of
    ``code`` (with ``errors`` for a 422); its body is not read on."""

    code: ClassVar[str | None] = None
    errors: list[dict[str, Any]] | None = None
