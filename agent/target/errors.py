"""The target's errors: a configuration it cannot serve, a Data-Out that does not fit
its task. ``reservoir target`` prints the first and exits 2; the second ends the
command with CHECK CONDITION (ABORTED COMMAND, ASC 0x4B).

::

    TargetError
     +-- ConfigError     a configuration that cannot be used (config.py)
     +-- SchemaError     a file that does not match the schema, one line a problem
     |                   (config_schema.py; config.py reports it as a ConfigError)
     +-- DataOutError    a Data-Out PDU that does not fit the task (tasks.py)
     +-- LioError        LIO cannot be reached or cannot take the configuration (lio.py)
"""

from __future__ import annotations

from reservoir.common.errors import ReservoirError

__all__ = ["TargetError"]


class TargetError(ReservoirError):
    """The root of the target's errors."""
