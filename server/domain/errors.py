"""The coordinator's domain errors: what the registry, a transfer's state or its
layouts do not allow. The services translate them once into the app's HTTP errors
(:mod:`reservoir.server.app.errors`); the scheduler records them on the transfer.

::

    DomainError
     +-- TransitionError   the transfer's state does not allow the action (states.py)
     +-- VolumeError       a volume or NIC cannot take part as registered (leg_copies.py)
     +-- LayoutError       two volume sets' stripe layouts the agents cannot carry (legs.py)
     +-- ProbeError        a run of the path probe went wrong (probe.py)
"""

from __future__ import annotations

from reservoir.common.errors import ReservoirError

__all__ = ["DomainError", "LayoutError", "TransitionError", "VolumeError"]


class DomainError(ReservoirError):
    """The root of the coordinator's domain errors."""


class TransitionError(DomainError):
    """The transfer's state does not allow the action (the API answers 409)."""


class VolumeError(DomainError):
    """A volume cannot take part as registered (the message says what to register)."""


class LayoutError(DomainError):
    """Two volume sets whose stripe layouts the agents' engine cannot carry."""
