"""The coordinator: REST API over a registry of agents, volume sets, links and transfers.

``reservoir server`` serves ``/api/v1`` (FastAPI, ``main.py``) on uvicorn, with its state
in a SQLAlchemy database (SQLite by default) migrated by Alembic at start. What runs
transfers on the agents (scheduler, equalizer, telemetry, metrics) comes later behind
the seam in ``scheduler.py``; this version only records what it would do.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reservoir.server.core.config import ServerSettings, SettingsError, load_settings
    from reservoir.server.main import API_PREFIX, create_app
    from reservoir.server.scheduler import NoopScheduler, Scheduler
    from reservoir.server.serve import make_server

__all__ = [
    "API_PREFIX",
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
