"""A pyroute2 tc plugin for sch_fq, which pyroute2 0.9 does not ship.

Only what pacing needs: ``maxrate`` (TCA_FQ_FLOW_MAX_RATE, bytes/s, u32) on the
way in, the attribute table (from ``include/uapi/linux/pkt_sched.h``) on the way
out so :func:`reservoir.pacing.nic.current` can read the rate back. Registered in
pyroute2's plugin table by :func:`reservoir.pacing._tc.register_plugins` (idempotent).
"""

from __future__ import annotations

from typing import Any

from pyroute2.netlink import nla  # type: ignore[import-untyped]
from pyroute2.netlink.rtnl import TC_H_ROOT  # type: ignore[import-untyped]

parent = TC_H_ROOT


def get_parameters(kwarg: dict[str, Any]) -> dict[str, Any]:
    """TCA_OPTIONS of ``tc qdisc add ... fq maxrate <maxrate>`` (maxrate in bytes/s)."""
    return {"attrs": [["TCA_FQ_FLOW_MAX_RATE", int(kwarg["maxrate"])]]}


def fix_request(request: dict[str, Any]) -> None:
    request.pop("maxrate", None)


class options(nla):  # type: ignore[misc]  # noqa: N801 (pyroute2's plugin naming)
    nla_map = (
        ("TCA_FQ_UNSPEC", "none"),
        ("TCA_FQ_PLIMIT", "uint32"),
        ("TCA_FQ_FLOW_PLIMIT", "uint32"),
        ("TCA_FQ_QUANTUM", "uint32"),
        ("TCA_FQ_INITIAL_QUANTUM", "uint32"),
        ("TCA_FQ_RATE_ENABLE", "uint32"),
        ("TCA_FQ_FLOW_DEFAULT_RATE", "uint32"),
        ("TCA_FQ_FLOW_MAX_RATE", "uint32"),
        ("TCA_FQ_BUCKETS_LOG", "uint32"),
        ("TCA_FQ_FLOW_REFILL_DELAY", "uint32"),
        ("TCA_FQ_ORPHAN_MASK", "uint32"),
        ("TCA_FQ_LOW_RATE_THRESHOLD", "uint32"),
        ("TCA_FQ_CE_THRESHOLD", "uint32"),
        ("TCA_FQ_TIMER_SLACK", "uint32"),
        ("TCA_FQ_HORIZON", "uint32"),
        ("TCA_FQ_HORIZON_DROP", "uint8"),
    )
