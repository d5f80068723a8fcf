"""Each agent's own tokens, derived from the coordinator's secret key and its name.

For an agent named NAME (names are unique in the coordinator) at token generation
G (0 at registration, one more each time its tokens are rotated)::

    control token    = base64url(HMAC-SHA256(key, "agent-control:" + NAME [+ "#" G]))
    heartbeat token  = base64url(HMAC-SHA256(key, "agent-heartbeat:" + NAME [+ "#" G]))

(``#G`` only from generation 1 on: generation 0 is what it always was.)

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


def _derive(key: bytes, purpose: str, name: str, generation: int = 0) -> str:
    message = purpose + name + (f"#{generation}" if generation else "")
    mac = hmac.new(key, message.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True)
class AgentCredentials:
    """The coordinator's key and what it derives (the key hidden in repr)."""

    key: bytes = field(repr=False)

    @classmethod
    def from_file(cls, path: Path) -> AgentCredentials:
        """From the key file ``path`` (made if missing; ``SecretKeyError``)."""
        return cls(load_or_create(path))

    def control_token(self, name: str, generation: int = 0) -> str:
        """What the coordinator presents to agent ``name``."""
        return _derive(self.key, CONTROL, name, generation)

    def control_digest(self, name: str, generation: int = 0) -> str:
        """``sha256:<hex>`` of the control token: what agent ``name`` accepts."""
        return hash_token(self.control_token(name, generation))

    def heartbeat_token(self, name: str, generation: int = 0) -> str:
        """What agent ``name`` presents to the coordinator."""
        return _derive(self.key, HEARTBEAT, name, generation)

    def is_heartbeat_token(self, name: str, token: str, generation: int = 0) -> bool:
        """Whether ``token`` is agent ``name``'s heartbeat token (constant time)."""
        expected = self.heartbeat_token(name, generation).encode()
        return hmac.compare_digest(expected, token.encode())

    def heartbeat_owner(self, token: str, agents: Iterable[tuple[str, int]]) -> str | None:
        """Which of ``agents`` (name, token generation) ``token`` is the heartbeat token
        of, if any."""
        owner = None
        for name, generation in agents:
            if self.is_heartbeat_token(name, token, generation):
                owner = name
        return owner
