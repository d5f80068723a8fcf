"""The rates a copy's connections jump-start at (design 3.3), from its pacing plan.

A copy whose caps pace NICs (``nic_pacing_rates``, ``nic_pacing_flows``) gives each
of its streams on a NIC an even part of that NIC's rate. Its connections from one of
the NIC's addresses start with the window that carries that part for a round trip
(:mod:`reservoir.agent.initiator._jump`), instead of slow-starting from 10 segments.
A NIC's qdisc counts whole Ethernet frames, TCP's window counts payload: a stream's
rate is its part of the NIC rate times 1448 / 1514 (payload per frame, MTU 1500).
Where exactly one NIC is paced, connections made without a local address start at
its rate too. A copy without NIC rates is not jump-started: without the plan's rate
a large first window would be a guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from reservoir.agent.control.models import NicPublic
from reservoir.agent.initiator import ANY_LOCAL

PAYLOAD_PER_FRAME = 1448 / 1514


def jump_rates(
    nic_rates: Mapping[str, int], flows: Mapping[str, int], nics: Sequence[NicPublic]
) -> dict[str, int]:
    """Bytes per second a connection from each local address starts at: each paced
    NIC's rate (bytes/s of frames) over its flows, as payload."""
    addresses = {nic.name: nic.addresses for nic in nics}
    rates: dict[str, int] = {}
    for name, rate in nic_rates.items():
        share = int(rate * PAYLOAD_PER_FRAME) // max(1, flows.get(name, 1))
        if share < 1:
            continue
        for address in addresses.get(name, []):
            rates[address] = share
        if len(nic_rates) == 1:
            rates[ANY_LOCAL] = share
    return rates
