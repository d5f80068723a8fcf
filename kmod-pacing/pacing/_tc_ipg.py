"""A pyroute2 tc plugin for the project's ipg qdisc (kmod-pacing/module/sch_ipg.c).

``line_rate`` (bytes/s, u64) and ``gap`` (byte times, u32), and optionally ``limit``
(packets), on the way in; the same attributes on the way out, and the xstats
(packets that waited for their departure, GSO packets split, packets whose timer
came more than a slot late and the time lost to them). The attribute numbers
are the module's ``enum TCA_IPG_*``. Registered in pyroute2's plugin table by
:func:`register` (idempotent); the module is stdlib plus pyroute2 so that a guest's
Python can load it alone.
"""

from __future__ import annotations

import sys
from typing import Any

from pyroute2.netlink import nla  # type: ignore[import-untyped]
from pyroute2.netlink.rtnl import TC_H_ROOT  # type: ignore[import-untyped]

parent = TC_H_ROOT
XSTATS_FIELDS = ("delayed", "segmented", "late", "late_ns")  # struct tc_ipg_xstats, u64s


def get_parameters(kwarg: dict[str, Any]) -> dict[str, Any]:
    """TCA_OPTIONS of an ipg qdisc: line_rate (bytes/s), gap (byte times), limit."""
    attrs: list[list[Any]] = [["TCA_IPG_LINE_RATE", int(kwarg["line_rate"])]]
    attrs.append(["TCA_IPG_GAP", int(kwarg.get("gap", 0))])
    if kwarg.get("limit") is not None:
        attrs.append(["TCA_IPG_LIMIT", int(kwarg["limit"])])
    return {"attrs": attrs}


def fix_request(request: dict[str, Any]) -> None:
    for key in ("line_rate", "gap", "limit"):
        request.pop(key, None)


class options(nla):  # type: ignore[misc]  # noqa: N801 (pyroute2's plugin naming)
    nla_map = (
        ("TCA_IPG_UNSPEC", "none"),
        ("TCA_IPG_LINE_RATE", "uint64"),
        ("TCA_IPG_GAP", "uint32"),
        ("TCA_IPG_LIMIT", "uint32"),
        ("TCA_IPG_PAD", "none"),
    )


class stats(nla):  # type: ignore[misc]  # noqa: N801 (pyroute2 decodes TCA_XSTATS with it)
    """The module's xstats: ``delayed`` and ``segmented`` packets, ``late`` packets
    (their timer came more than a slot late) and ``late_ns`` (what the train lost)."""

    fields = tuple((name, "Q") for name in XSTATS_FIELDS)


def register(plugins: dict[str, Any]) -> None:
    """Teach pyroute2 the ipg qdisc (pyroute2's ``tcmsg.plugins`` table)."""
    plugins.setdefault("ipg", sys.modules[__name__])
