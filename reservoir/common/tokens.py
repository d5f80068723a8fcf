"""Bearer tokens at rest: SHA-256 digests, compared in constant time, never logged.

One rule for the agent's and the coordinator's settings (in reservoir.common, below
both, so the coordinator does not import the agent). A token is accepted in two
spellings wherever a setting takes one: the token itself, or its digest
``sha256:<64 lowercase hex digits>`` (what a configuration file should hold). Either
way only the digest is kept in memory, and a presented token is hashed before it is
compared, so presenting a digest never authenticates. Tokens are long random strings,
so one unsalted SHA-256 is enough: there is nothing to brute-force that is shorter
than the token itself.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable

__all__ = [
    "HASH_PREFIX",
    "check_spelling",
    "generate_token",
    "hash_token",
    "is_hashed",
    "matches",
    "to_digest",
]

HASH_PREFIX = "sha256:"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def hash_token(token: str) -> str:
    """``sha256:<hex>`` of ``token``."""
    return HASH_PREFIX + hashlib.sha256(token.encode()).hexdigest()


def is_hashed(text: str) -> bool:
    return _DIGEST.fullmatch(text) is not None


def check_spelling(text: str) -> None:
    """ValueError for text that starts as a digest but is not one (a typo would
    otherwise be taken for a plain token, and no token would ever match it)."""
    if text.startswith(HASH_PREFIX) and not is_hashed(text):
        raise ValueError(f"a digest is {HASH_PREFIX} and 64 lowercase hexadecimal digits")


def to_digest(text: str) -> str:
    """The digest of a token given either plain or already hashed."""
    return text if is_hashed(text) else hash_token(text)


def matches(token: str, digests: Iterable[str]) -> bool:
    """Whether ``token`` hashes to one of ``digests`` (every digest is compared)."""
    given = hash_token(token).encode()
    found = False
    for digest in digests:
        found |= hmac.compare_digest(given, digest.encode())
    return found


def generate_token() -> str:
    """A new random token (43 URL-safe characters, 256 bits)."""
    return secrets.token_urlsafe(32)
