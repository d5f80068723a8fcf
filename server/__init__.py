"""The coordinator: REST API over a registry of agents, volume sets, links and transfers.

``reservoir server`` serves ``/api/v1`` (FastAPI, ``main.py``) on uvicorn, with its state
in a SQLAlchemy database (SQLite by default) migrated by Alembic at start. The
scheduler (``scheduler.py``) runs each transfer's legs as copies on the source agents
through their control API, tracks them and recovers after restarts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reservoir.server.core.config import ServerSettings, SettingsError, load_settings
    from reservoir.server.main import API_PREFIX, create_app
    from reservoir.server.scheduler import AgentScheduler, NoopScheduler, Scheduler
    from reservoir.server.serve import make_server

__all__ = [
    "API_PREFIX",
    "AgentScheduler",
    "NoopScheduler",
    "Scheduler",
    "ServerSettings",
    "SettingsError",
    "create_app",
    "load_settings",
    "make_server",
]

_HOME = {
    "API_PREFIX": "main",
    "AgentScheduler": "scheduler",
    "NoopScheduler": "scheduler",
    "Scheduler": "scheduler",
    "ServerSettings": "core.config",
    "SettingsError": "core.config",
    "create_app": "main",
    "load_settings": "core.config",
    "make_server": "serve",
}


def __getattr__(name: str) -> Any:
    """Imported on first use: ``reservoir`` commands other than ``server`` (a copy, the
    target) must not pay for FastAPI, SQLAlchemy and Alembic at start."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
