"""Each agent's own tokens, derived from the coordinator's secret key and its name.

For an agent named NAME (names are unique in the coordinator)::

    control token    = base64url(HMAC-SHA256(key, "agent-control:" + NAME))
    heartbeat token  = base64url(HMAC-SHA256(key, "agent-heartbeat:" + NAME))

The coordinator sends the control token to the agent (which keeps only its SHA-256
digest); the agent sends the heartbeat token to the coordinator. Neither is stored
anywhere: the coordinator recomputes them when it needs them, so its database holds
nothing that would let a reader act as the coordinator towards an agent, or as one
agent towards the coordinator. ``reservoir server agent-credentials NAME`` prints
what goes into the agent's configuration.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from reservoir.common.tokens import hash_token
from reservoir.server.app.core.secret_key import load_or_create

__all__ = ["CONTROL", "HEARTBEAT", "AgentCredentials"]

CONTROL = "agent-control:"
HEARTBEAT = "agent-heartbeat:"


def _derive(key: bytes, purpose: str, name: str) -> str:
    mac = hmac.new(key, (purpose + name).encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True)
class AgentCredentials:
    """The coordinator's key and what it derives (the key hidden in repr)."""

    key: bytes = field(repr=False)

    @classmethod
    def from_file(cls, path: Path) -> AgentCredentials:
        """From the key file ``path`` (made if missing; ``SecretKeyError``)."""
        return cls(load_or_create(path))

    def control_token(self, name: str) -> str:
        """What the coordinator presents to agent ``name``."""
        return _derive(self.key, CONTROL, name)

    def control_digest(self, name: str) -> str:
        """``sha256:<hex>`` of the control token: what agent ``name`` accepts."""
        return hash_token(self.control_token(name))

    def heartbeat_token(self, name: str) -> str:
        """What agent ``name`` presents to the coordinator."""
        return _derive(self.key, HEARTBEAT, name)

    def is_heartbeat_token(self, name: str, token: str) -> bool:
        """Whether ``token`` is agent ``name``'s heartbeat token (constant time)."""
        return hmac.compare_digest(self.heartbeat_token(name).encode(), token.encode())

    def heartbeat_owner(self, token: str, names: Iterable[str]) -> str | None:
        """Which of ``names`` ``token`` is the heartbeat token of, if any."""
        owner = None
        for name in names:
            if self.is_heartbeat_token(name, token):
                owner = name
        return owner
