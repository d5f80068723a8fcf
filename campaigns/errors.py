"""The campaigns' errors. ``reservoir campaign`` prints them (exit 2 for a campaign
file or results that do not validate, 1 for a run that failed); the coordinator
answers 422 naming the field.

::

    CampaignError
     +-- CampaignFileError   a campaign that cannot be run, every problem a line (_spec.py)
     +-- ResultsError        results that do not match the schema, naming the field
     |                       (results.py)
     +-- Iperf3Error         an iperf3 process failed or did not finish (run/iperf3_run.py)
     +-- SiteError           the coordinator refused a registration, or a process did
                             not start (run/site.py)

The runner's ``Cancelled`` (SIGTERM) is a ``BaseException`` on purpose, outside this
tree: it unwinds through every ``except Exception`` to the lab's cleanup.
"""

from __future__ import annotations

from reservoir.common.errors import ReservoirError

__all__ = ["CampaignError"]


class CampaignError(ReservoirError):
    """The root of the campaigns' errors."""
