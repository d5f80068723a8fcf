"""The host's service manager: Reservoir's systemd units, written where systemd reads
them (``reservoir system install-units``).

The units are shipped as templates in config/systemd/ (package data of
``reservoir.config``): ``reservoir-agent.service``, ``reservoir-target.service`` and
``reservoir-coordinator.service``. :func:`install_units` writes them with the path of
this installation's ``reservoir`` script in ExecStart, atomically and with mode 0644,
each file marked on its first line (:data:`MARK`) so that Reservoir replaces or
removes (:func:`remove_units`) only a unit file it wrote.
"""

from __future__ import annotations

from ._units import (
    MARK,
    UNIT_DIR,
    UNITS,
    Outcome,
    UnitFileError,
    hidden_from_units,
    install_units,
    remove_units,
    render_unit,
    reservoir_executable,
)

__all__ = [
    "MARK",
    "UNITS",
    "UNIT_DIR",
    "Outcome",
    "UnitFileError",
    "hidden_from_units",
    "install_units",
    "remove_units",
    "render_unit",
    "reservoir_executable",
]
