"""The coordinator: REST API over a registry of agents, volume sets, links and transfers.

``reservoir server`` serves ``/api/v1`` (FastAPI, ``app/main.py``) on uvicorn, with its
state in a SQLAlchemy database (SQLite by default) migrated by Alembic at start. The
scheduler (``domain/scheduler.py``) runs each transfer's legs as copies on the source
agents through their control API, tracks them and recovers after restarts.

By role: :mod:`.app` (the API, its services and models, the database, settings),
:mod:`.domain` (scheduler, legs, states, equalizer, pacing plans, probes, telemetry)
and :mod:`.clients` (the HTTP client and the command lines, which the coordinator
never imports).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reservoir.server.app.core.config import ServerSettings, SettingsError, load_settings
    from reservoir.server.app.main import API_PREFIX, create_app
    from reservoir.server.app.serve import make_server
    from reservoir.server.domain.scheduler import AgentScheduler, NoopScheduler, Scheduler

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
    "API_PREFIX": "app.main",
    "AgentScheduler": "domain.scheduler",
    "NoopScheduler": "domain.scheduler",
    "Scheduler": "domain.scheduler",
    "ServerSettings": "app.core.config",
    "SettingsError": "app.core.config",
    "create_app": "app.main",
    "load_settings": "app.core.config",
    "make_server": "app.serve",
}


def __getattr__(name: str) -> Any:
    """Imported on first use: ``reservoir`` commands other than ``server`` (a copy, the
    target) must not pay for FastAPI, SQLAlchemy and Alembic at start."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
