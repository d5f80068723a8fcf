"""The netlink boundary of pacing: pyroute2 in, typed values and our errors out.

Everything pyroute2 (untyped) stays in this module, and its errors are
translated here, once::

    PacingError            a netlink request failed (names the device, the
     |                     namespace and the kernel's error)
     +-- DeviceNotFoundError    no such interface, or no such namespace
     +-- QdiscBusyError         the device's root qdisc is not ours and not a default

Rates cross this boundary in bytes/s, as the kernel's tc structures keep them.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyroute2 import IPRoute, netns  # type: ignore[import-untyped]
from pyroute2.netlink.exceptions import NetlinkError  # type: ignore[import-untyped]
from pyroute2.netlink.rtnl.tcmsg import plugins  # type: ignore[import-untyped]

from reservoir.pacing import _tc_fq, _tc_ipg
from reservoir.pacing.errors import PacingError

TC_H_ROOT = 0xFFFFFFFF
NETNS_DIR = "/run/netns"
U32_MAX = (1 << 32) - 1


class DeviceNotFoundError(PacingError, LookupError):
    """The interface (or its namespace) does not exist."""


class QdiscBusyError(PacingError):
    """The interface's root qdisc was installed by someone else: we leave it alone."""


@dataclass(frozen=True)
class RootQdisc:
    """The root qdisc of a device as the kernel reports it.

    ``handle`` 0 means a default the kernel attached itself (noqueue, pfifo_fast,
    mq, ...); a device that is down reports none, shown as kind ``"noop"``.
    ``rate_bytes`` is the shaping rate where the kind has one we can read.
    """

    kind: str
    handle: int
    rate_bytes: int | None = None


def register_plugins() -> None:
    """Teach pyroute2 the fq qdisc (pyroute2 0.9 has no plugin) and the project's ipg
    qdisc; idempotent, done by :func:`netlink` for every socket."""
    plugins.setdefault("fq", _tc_fq)
    _tc_ipg.register(plugins)


IPG_OVERHEAD = 24  # byte times a frame costs beyond its skb: FCS, preamble, gap (sch_ipg.c)
ETH_HEADER = 14


def ipg_rate(line_rate_bytes: int, gap: int, mtu: int) -> int:
    """Bytes/s of full frames (counted as tbf counts them, without FCS and preamble)
    that an ipg qdisc with ``line_rate_bytes`` and ``gap`` lets through."""
    frame = mtu + ETH_HEADER
    return line_rate_bytes * frame // (frame + IPG_OVERHEAD + gap)


def _where(ifname: str, ns: str | None) -> str:
    return f"{ifname} in namespace {ns}" if ns else f"{ifname}"


@contextmanager
def netlink(ns: str | None) -> Iterator[Any]:
    """An rtnetlink socket in namespace ``ns`` (None: ours). Never creates a namespace."""
    if ns is not None and not os.path.exists(os.path.join(NETNS_DIR, ns)):
        raise DeviceNotFoundError(f"network namespace {ns!r} does not exist")
    register_plugins()  # so fq and ipg options go out encoded and read back decoded
    ipr = IPRoute() if ns is None else IPRoute(netns=ns, flags=0)
    try:
        yield ipr
    finally:
        ipr.close()


def ifindex(ipr: Any, ifname: str, ns: str | None) -> int:
    """The index of ``ifname``; DeviceNotFoundError if there is no such device."""
    found: list[int] = ipr.link_lookup(ifname=ifname)
    if not found:
        raise DeviceNotFoundError(f"no network device {_where(ifname, ns)}")
    return int(found[0])


def has_index(ipr: Any, index: int) -> bool:
    """Whether a device with this index still exists."""
    try:
        ipr.get_links(index)
    except NetlinkError as e:
        if e.code == errno.ENODEV:
            return False
        raise
    return True


def mtu(ipr: Any, index: int) -> int:
    link = ipr.get_links(index)[0]
    return int(link.get_attr("IFLA_MTU"))


def root_qdisc(ipr: Any, index: int) -> RootQdisc:
    """The root qdisc of device ``index`` and, for tbf/htb/fq, its rate."""
    for msg in ipr.get_qdiscs(index):
        if msg["index"] == index and msg["parent"] == TC_H_ROOT:
            kind = str(msg.get_attr("TCA_KIND"))
            return RootQdisc(kind, int(msg["handle"]), _rate_of(ipr, index, kind, msg))
    return RootQdisc("noop", 0)


def _rate_of(ipr: Any, index: int, kind: str, msg: Any) -> int | None:
    opts = msg.get_attr("TCA_OPTIONS")
    if kind == "tbf" and opts is not None:
        return int(opts.get_attr("TCA_TBF_PARMS")["rate"])
    if kind == "fq" and opts is not None:
        rate = opts.get_attr("TCA_FQ_FLOW_MAX_RATE")
        return None if rate is None or rate == U32_MAX else int(rate)
    if kind == "htb":
        return _htb_rate(ipr, index, int(msg["handle"]))
    if kind == "ipg" and opts is not None:
        line_rate, gap = opts.get_attr("TCA_IPG_LINE_RATE"), opts.get_attr("TCA_IPG_GAP")
        return (
            None if line_rate is None else ipg_rate(int(line_rate), int(gap or 0), mtu(ipr, index))
        )
    return None


def _htb_rate(ipr: Any, index: int, handle: int) -> int | None:
    """The rate of the class pacing installs under an htb root (minor 1)."""
    for cls in ipr.get_classes(index):
        if cls["handle"] == handle | 1:
            opts = cls.get_attr("TCA_OPTIONS")
            rate64 = opts.get_attr("TCA_HTB_RATE64")
            return int(rate64 or opts.get_attr("TCA_HTB_PARMS")["rate"])
    return None


def _request(what: str, ifname: str, ns: str | None, call: Any, *args: Any, **kw: Any) -> None:
    try:
        call(*args, **kw)
    except NetlinkError as e:
        detail = "qdisc kind unknown to this kernel" if e.code == errno.ENOENT else e.args[-1]
        raise PacingError(f"{what} on {_where(ifname, ns)} failed: {detail}") from e


def add_tbf(
    ipr: Any,
    dev: tuple[int, str, str | None],
    handle: int,
    rate_bytes: int,
    *,
    burst: int,
    limit: int,
) -> None:
    """Root TBF: ``rate_bytes`` with a bucket of ``burst`` bytes and ``limit`` bytes queued."""
    index, ifname, ns = dev
    args = ("add", "tbf", index, handle)
    kw = {"rate": rate_bytes, "burst": burst, "limit": limit}
    _request("adding a tbf root qdisc", ifname, ns, ipr.tc, *args, **kw)


def add_htb(
    ipr: Any, dev: tuple[int, str, str | None], handle: int, rate_bytes: int, burst: int
) -> None:
    """Root HTB whose default (and only) class 1 has rate = ceil = ``rate_bytes``."""
    index, ifname, ns = dev
    _request("adding an htb root qdisc", ifname, ns, ipr.tc, "add", "htb", index, handle, default=1)
    kw = {"parent": handle, "rate": rate_bytes, "ceil": rate_bytes, "burst": burst, "cburst": burst}
    kw["quantum"] = burst
    try:
        _request(
            "adding the htb class", ifname, ns, ipr.tc, "add-class", "htb", index, handle | 1, **kw
        )
    except PacingError:
        delete_root(ipr, dev, handle)
        raise


def add_fq(ipr: Any, dev: tuple[int, str, str | None], handle: int, maxrate_bytes: int) -> None:
    """Root fq pacing every flow at most at ``maxrate_bytes``."""
    index, ifname, ns = dev
    args = ("add", "fq", index, handle)
    _request("adding an fq root qdisc", ifname, ns, ipr.tc, *args, maxrate=maxrate_bytes)


def add_ipg(
    ipr: Any, dev: tuple[int, str, str | None], handle: int, line_rate_bytes: int, gap: int
) -> None:
    """Root ipg (kmod-pacing's module): each frame waits for its slot on a line of
    ``line_rate_bytes``, ``gap`` byte times after the previous one."""
    index, ifname, ns = dev
    args = ("add", "ipg", index, handle)
    _request("adding an ipg root qdisc", ifname, ns, ipr.tc, *args, line_rate=line_rate_bytes,
             gap=gap)  # fmt: skip


def delete_root(ipr: Any, dev: tuple[int, str, str | None], handle: int) -> None:
    """Delete the root qdisc ``handle``; the kernel then attaches the default one."""
    index, ifname, ns = dev
    kw = {"index": index, "handle": handle, "parent": TC_H_ROOT}
    _request("deleting the root qdisc", ifname, ns, ipr.tc, "del", **kw)


def probe_qdisc(kind: str) -> bool:
    """Whether the kernel knows qdisc ``kind`` (no options): tried as the root of
    a veth in a scratch namespace created and deleted here."""
    name = f"rsvpace-probe-{os.getpid()}-{secrets.token_hex(3)}"
    netns.create(name)
    try:
        with netlink(name) as ipr:
            ipr.link("add", ifname="probe0", kind="veth", peer="probe1")
            index = ifindex(ipr, "probe0", name)
            try:
                ipr.tc(
                    "add", kind, index, 0x10000, **({"maxrate": U32_MAX} if kind == "fq" else {})
                )
            except NetlinkError as e:
                if e.code in (errno.ENOENT, errno.EOPNOTSUPP):
                    return False
                raise PacingError(f"probing qdisc {kind} failed: {e.args[-1]}") from e
            return True
    finally:
        netns.remove(name)
