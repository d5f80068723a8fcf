"""Paths (multilink): per-path health and failover after RI2N (design section 3.4)."""

from .health import HealthConfig, PathEvent, PathHealth, PathState

__all__ = ["HealthConfig", "PathEvent", "PathHealth", "PathState"]
