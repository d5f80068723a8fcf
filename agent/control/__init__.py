"""The agent and its HTTP control API for a coordinator.

``reservoir agent serve --config agent.toml`` runs, in one event loop, the builtin
iSCSI target of the configuration and a token-authenticated API under ``/api/v1``
(``/health``, ``/info``, ``/copies``...). Copies run as asyncio tasks of that loop,
managed by :class:`CopyManager`, which persists them in the state folder.
"""

from reservoir.agent.control.agent import Agent
from reservoir.agent.control.copies import (
    CopyConflictError,
    CopyFn,
    CopyJob,
    CopyManager,
    UnknownCopyError,
)
from reservoir.agent.control.core.config import AgentSettings, AgentSettingsError, load_settings
from reservoir.agent.control.main import API_PREFIX, create_app
from reservoir.agent.control.models import CopyCreate, CopyState
from reservoir.agent.control.serve import make_server

__all__ = [
    "API_PREFIX",
    "Agent",
    "AgentSettings",
    "AgentSettingsError",
    "CopyConflictError",
    "CopyCreate",
    "CopyFn",
    "CopyJob",
    "CopyManager",
    "CopyState",
    "UnknownCopyError",
    "create_app",
    "load_settings",
    "make_server",
]
