"""LFN benchmarking campaigns (config/campaigns/NAME.toml): a topology, a matrix of
scenarios, repetitions, events during a run, an iperf3 baseline and a quick subset.

    from reservoir.lab import campaign

    c = campaign.load(campaign.CAMPAIGN_DIR / "lfn-2x500m-100ms.toml")
    for scenario in c.scenarios():        # or c.quick() for make bench
        spec = c.lab_spec(scenario)       # the lab to build (its loss on the paths)
        ...

The file format is described in _spec.py (the whole file), _topology.py, _matrix.py
(dimensions, expansion rules, names, exclude, quick) and _events.py; the time model of
:meth:`Campaign.estimate_seconds` in _estimate.py. The results of a run and their
report live in _results.py and _report.py.
"""

from reservoir.lab.campaign._matrix import DIMENSIONS, Matrix
from reservoir.lab.campaign._scenario import Event, Scenario
from reservoir.lab.campaign._spec import (
    CAMPAIGN_DIR,
    DATA_ROOT,
    Campaign,
    CampaignError,
    load,
    parse,
    shipped,
)
from reservoir.lab.campaign._topology import Topology

__all__ = [
    "CAMPAIGN_DIR",
    "DATA_ROOT",
    "DIMENSIONS",
    "Campaign",
    "CampaignError",
    "Event",
    "Matrix",
    "Scenario",
    "Topology",
    "load",
    "parse",
    "shipped",
]
