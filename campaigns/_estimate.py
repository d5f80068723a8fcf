"""How long a campaign takes: a simple model, to keep ``make bench``'s quick subsets
under their budget (17 minutes on the 2-core development machine).

- An iperf3 run lasts its ``duration_s``.
- A reservoir run copies ``size`` at ``GOODPUT`` (85%, what the paper reached) of the
  topology's bottleneck (loopback: its ``bottleneck_mbit`` if given, else 10 Gbit/s).
  With random loss and a loss-based congestion control (cubic, reno), the rate is at
  most the Mathis bound, ``streams x MSS / RTT x 1.22 / sqrt(loss)``; BBR does not
  back off for loss at these rates and keeps the bottleneck's.
- A gridftp or xrdcp run copies ``size`` at the rate the model gives reservoir. That
  is about what design section 5 measured on the LFN (725 and 760 Mbit/s of 1 Gbit/s)
  and for GridFTP on loopback; xrdcp reached half of it on loopback, so its loopback
  runs take about twice their estimate.
- Every run adds ``RUN_SETUP_S`` (start the peers or agents, make and fill the
  volumes, verify, stop), a gridftp or xrdcp run ``PEER_SETUP_S`` instead (start its
  servers, hash the destination, remove it: no agents, no volumes), and every lab
  build ``LAB_SETUP_S`` (a campaign builds its lab once per loss value).

Events are not modelled: a link cut slows a copy down, and the estimate is low by
about the capacity lost during the outage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from reservoir.campaigns._scenario import PEERS, Scenario
from reservoir.campaigns._topology import LOOPBACK_MBIT, Topology

GOODPUT = 0.85
RUN_SETUP_S = 10.0
PEER_SETUP_S = 3.0
LAB_SETUP_S = 5.0
MSS_BYTES = 1448  # MTU 1500 with timestamps
MATHIS_C = 1.22
LOSS_BASED = ("cubic", "reno")


def expected_mbit(scenario: Scenario, topology: Topology) -> float:
    """The rate a reservoir (or gridftp, xrdcp) run is expected to reach, in Mbit/s."""
    rate = (topology.bottleneck_mbit or LOOPBACK_MBIT) * GOODPUT
    rtt_ms = topology.rtt_ms
    if scenario.loss and scenario.cc in LOSS_BASED and rtt_ms:
        per_stream = MSS_BYTES * 8 / (rtt_ms / 1e3) * MATHIS_C / math.sqrt(scenario.loss)
        rate = min(rate, scenario.streams * per_stream / 1e6)
    return rate


def run_seconds(scenario: Scenario, topology: Topology) -> float:
    """One run, setup included."""
    if scenario.duration_s is not None:
        return scenario.duration_s + RUN_SETUP_S
    size = scenario.size_bytes or 0
    setup = PEER_SETUP_S if scenario.tool in PEERS else RUN_SETUP_S
    return size * 8 / (expected_mbit(scenario, topology) * 1e6) + setup


def estimate_seconds(scenarios: Sequence[Scenario], repetitions: int, topology: Topology) -> float:
    runs = sum(run_seconds(s, topology) for s in scenarios) * repetitions
    labs = len({s.loss for s in scenarios}) if topology.kind == "lab" else 0
    return runs + labs * LAB_SETUP_S
