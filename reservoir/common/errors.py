"""The root of every error Reservoir raises on purpose, and the tree of its components.

Each component has one root, drawn in the docstring of the module that holds it; what
a component raises to its callers derives from that root, and its boundary (an HTTP
handler, a CLI's ``main``, the copy engine) translates it once. Programming errors
stay Python's own (``ValueError`` for a bad argument, ``TypeError``, ...): they are
bugs, never caught as user errors.

::

    ReservoirError
     +-- BuildError            reservoir.common.build_cache: a native build failed
     +-- SettingsFileError     reservoir.common.settings_file: a settings file's problems
     +-- ShippedError          reservoir.shipped: a shipped file is missing
     +-- UnitFileError         reservoir.system: systemd unit files (install-units)
     +-- IscsiError            reservoir.agent.iscsi.errors: the wire protocol
     +-- CheckConditionError   reservoir.agent.scsi: a command ends with sense data
     +-- StorageError          reservoir.agent.storage: volumes and engines (an OSError)
     +-- TargetError           reservoir.agent.target.errors: the target's configuration
     +-- InitiatorError        reservoir.agent.initiator: sessions and commands
     +-- CopyError             reservoir.agent.transfer: a copy failed
     +-- TuningError           reservoir.agent.tuning: host tuning
     +-- ControlError          reservoir.agent.control.errors: the agent's API (HTTP status)
     +-- PacingError           reservoir.pacing.errors: qdiscs, cwnd caps, BPF
     +-- ServerError           reservoir.server.app.errors: the coordinator (HTTP status)
     +-- DomainError           reservoir.server.domain.errors: transfers, legs, probes
     +-- ClientError           reservoir.server.clients.client: the coordinator's clients
     +-- CampaignError         reservoir.campaigns.errors: campaign files, runs, results
     +-- LabError              reservoir.lab.errors: the network lab and its benches

``tests/unit/test_error_trees.py`` holds every error class of a component to its root
and to the drawing.
"""

from __future__ import annotations

__all__ = ["ReservoirError"]


class ReservoirError(Exception):
    """An error Reservoir raises on purpose; the message is one clear line for a user."""
