"""LFN benchmarking campaigns (config/campaigns/NAME.toml): a topology, a matrix of
scenarios, repetitions, events during a run, an iperf3 baseline and a quick subset.

    from reservoir import campaigns

    c = campaigns.load(campaigns.CAMPAIGN_DIR / "lfn-2x500m-100ms.toml")
    for scenario in c.scenarios():        # or c.quick() for make bench
        spec = c.lab_spec(scenario)       # the lab to build (its loss on the paths)
        ...

The file format is described in _spec.py (the whole file), _topology.py, _matrix.py
(dimensions, expansion rules, names, exclude, quick) and _events.py; the time model of
:meth:`Campaign.estimate_seconds` in _estimate.py. The results of a run and their
report live in results.py and report.py; running a campaign in run/ (the lab, the
tools, the runner), ``reservoir campaign`` in cli.py.

This package (without run/ and cli.py) is below the coordinator and the lab: the
coordinator reads campaigns, results and reports with it, the runner writes them.
"""

from reservoir.campaigns._matrix import DIMENSIONS, Matrix
from reservoir.campaigns._scenario import Event, Scenario
from reservoir.campaigns._spec import (
    CAMPAIGN_DIR,
    DATA_ROOT,
    Campaign,
    CampaignFileError,
    load,
    parse,
    shipped,
)
from reservoir.campaigns._topology import Topology

__all__ = [
    "CAMPAIGN_DIR",
    "DATA_ROOT",
    "DIMENSIONS",
    "Campaign",
    "CampaignFileError",
    "Event",
    "Matrix",
    "Scenario",
    "Topology",
    "load",
    "parse",
    "shipped",
]
