"""Bearer tokens: hashed at rest, compared in constant time, never logged.

The rule is shared with the agent and lives in :mod:`reservoir.common.tokens` (a small
layer-1 piece both sides import); this module keeps the coordinator's name for it.
"""

from __future__ import annotations

from reservoir.common.tokens import (
    HASH_PREFIX,
    check_spelling,
    generate_token,
    hash_token,
    is_hashed,
    matches,
    to_digest,
)

__all__ = [
    "HASH_PREFIX",
    "check_spelling",
    "generate_token",
    "hash_token",
    "is_hashed",
    "matches",
    "to_digest",
]
