"""NaN and Infinity are not JSON: a JSON body that holds one is refused with 422.

Python's ``json.loads``, which parses every request body, accepts the bare words
``NaN``, ``Infinity`` and ``-Infinity`` as floats. Such a float then passed into the
models (a NaN compares false with every bound) or into an error that cannot be encoded
back (``allow_nan=False``), and the request ended in a 500. The words are refused here,
once for every route, as the body is read and before the app parses it.

Only a body in which the letters of one of the words appear at all is parsed here (a
bytes search clears the others at once); one that is not JSON at all is left to the
app, which says so.
"""

from __future__ import annotations

import email.message
import json
from collections.abc import Sequence

from starlette.datastructures import Headers

from ._refusal import RefusedError

__all__ = ["NON_FINITE", "JsonWatch", "NonFiniteJsonError", "has_non_finite_number"]

NON_FINITE = "NaN and Infinity are not valid JSON numbers"
_WORDS = (b"NaN", b"Infinity")
_OVERLAP = len(b"Infinity") - 1  # a word split over two chunks is seen across them


class NonFiniteJsonError(RefusedError):
    code = "validation_failed"

    def __init__(self) -> None:
        super().__init__(422, NON_FINITE)
        self.errors = [{"loc": ["body"], "msg": NON_FINITE, "type": "json_invalid"}]


class _NonFiniteError(ValueError):
    pass


def _refuse(word: str) -> float:
    raise _NonFiniteError(word)


def _mentions(data: bytes) -> bool:
    return any(word in data for word in _WORDS)


def has_non_finite_number(body: bytes) -> bool:
    """Whether ``body``, parsed as JSON, holds NaN, Infinity or -Infinity as a number
    (not inside a string)."""
    if not _mentions(body):
        return False
    try:
        json.loads(body, parse_constant=_refuse)
    except _NonFiniteError:
        return True
    except (ValueError, RecursionError):  # not JSON at all: the app answers that
        return False
    return False


def is_json(headers: Headers) -> bool:
    """Whether the app will parse the body as JSON (declared so, or undeclared)."""
    declared = headers.get("content-type")
    if declared is None:
        return True
    message = email.message.Message()
    message["content-type"] = declared
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


class JsonWatch:
    """Follows a JSON body chunk by chunk; :meth:`end` parses it only if one of the
    words appeared."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.suspect = False
        self._tail = b""

    def add(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        across = self._tail + chunk[:_OVERLAP]
        self.suspect = self.suspect or _mentions(across) or _mentions(chunk)
        self._tail = across[-_OVERLAP:] if len(chunk) < _OVERLAP else chunk[-_OVERLAP:]

    def end(self) -> None:
        """Raises :class:`NonFiniteJsonError` for NaN or Infinity in the whole body."""
        if self.suspect and has_non_finite_number(_joined(self.chunks)):
            raise NonFiniteJsonError


def _joined(chunks: Sequence[bytes]) -> bytes:
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
