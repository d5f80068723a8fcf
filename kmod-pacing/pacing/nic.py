"""Per-NIC pacing: a root qdisc that sends below the NIC's share (design 3.3).

The modern form of the paper's IPG widening is a qdisc at the root of the NIC,
installed over rtnetlink (pyroute2; never by parsing ``tc`` output)::

    applied = apply("eth1", 940_000_000)          # or netns="lab-a"
    ...
    remove(applied)                               # the kernel's default root again

Which qdisc (``kind="auto"``):

* ``fq`` with ``maxrate`` where the kernel has sch_fq (probed once, cached):
  pacing per flow, from the socket's own schedule, no token bucket at all.
  maxrate caps each flow, not the NIC's sum: ``apply(..., flows=N)`` for a NIC
  that N streams share sets maxrate to rate / N, so together they keep the rate
  (a stream that idles leaves its share unused; measured in a guest, a 4-stream
  copy under maxrate = rate sent 2.2 times the plan, and 0.85 of it with rate / 4).
* otherwise ``tbf`` with a small bucket (:func:`burst_bytes`). TBF is the
  default over HTB because a bucket smaller than a GSO super-packet makes TBF
  segment it (``tbf_segment``) and send MTU frames spaced at the rate -- the
  packet train of IPG widening -- while HTB dequeues a 64 KiB GSO packet whole
  at line rate and only then waits; TBF is also a single qdisc (no class or
  default-class bookkeeping). Its queue holds 10 ms at the rate (at least
  256 KiB), so many TSQ-limited streams fit without local drops and the added
  delay stays small.
* ``htb`` on request: one default class, rate = ceil, burst = cburst = the same bucket.

The bucket is one frame at low rates but at least 500 us at the rate (at most
16 frames, so 64 KiB GSO packets are still split): with a bucket of exactly one
frame every frame waits for a timer, and the wakeup latency is lost for good
(the bucket cannot hold it). Measured on veth here (iperf3, one stream): one
frame gave 69% of 200 Mbit/s and 51% of 500 Mbit/s; 200 us gave 99.7% of both
on an idle machine but 92% of 500 Mbit/s with the 2 cores busy; 500 us gave
99.6-100.3% under that load. ``burst=`` sets
the bucket exactly (e.g. one frame, the paper's strict spacing).

Bookkeeping: each install is recorded before it happens in a state file under
``/run/reservoir-pacing/`` (atomic, 0600) named after the namespace and ifindex,
with the previous root qdisc, what was installed (handle ``5253:``, kind, rate)
and the owner's PID and start time. :func:`remove` deletes only a root qdisc
whose handle and kind still match; :func:`cleanup_stale` does that for files
whose owner died. A root qdisc someone else installed (non-zero handle) is
never replaced: :class:`QdiscBusyError`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reservoir.common.store import write_atomic
from reservoir.pacing import _tc
from reservoir.pacing._tc import DeviceNotFoundError, QdiscBusyError
from reservoir.pacing.errors import PacingError

__all__ = [
    "DEFAULT_KIND",
    "HANDLE",
    "KINDS",
    "STATE_DIR",
    "Applied",
    "DeviceNotFoundError",
    "PacingError",
    "Qdisc",
    "QdiscBusyError",
    "apply",
    "cleanup_stale",
    "current",
    "fq_available",
    "remove",
]

log = logging.getLogger(__name__)

STATE_DIR = Path("/run/reservoir-pacing")
HANDLE = 0x52530000
"""``5253:`` ("RS"): the handle of every root qdisc pacing installs."""
KINDS = ("ipg", "fq", "tbf", "htb")
DEFAULT_KIND = "tbf"
"""The qdisc used where sch_fq is missing (see the module docstring for why)."""
FRAME_OVERHEAD = 18
"""Bytes a frame carries beyond the MTU as the qdisc counts it: Ethernet header + VLAN tag."""
BURST_SECONDS = 500e-6
"""Token bucket depth in time at the rate: covers timer wakeup latency."""
MAX_BURST_FRAMES = 16
QUEUE_SECONDS = 0.010
MIN_QUEUE_BYTES = 256 << 10
MAX_RATE_32 = _tc.U32_MAX * 8
"""tbf and fq take the rate in a u32 of bytes/s through pyroute2: ~34.4 Gbit/s at most."""

_probed: dict[str, bool] = {}
"""Kernel features probed so far (qdisc kind -> present): a probe costs a namespace."""


@dataclass(frozen=True)
class Qdisc:
    """A root qdisc as read back from the kernel: kind, handle, rate (bit/s) if any."""

    kind: str
    handle: int
    rate_bps: int | None


@dataclass(frozen=True)
class Applied:
    """What :func:`apply` replaced and installed, and who owns it (the state file)."""

    ifname: str
    netns: str | None
    ifindex: int
    kind: str
    handle: int
    rate_bps: int
    burst_bytes: int
    limit_bytes: int
    previous_kind: str
    previous_handle: int
    owner_pid: int
    owner_start: int | None
    state_file: str
    line_rate_bps: int = 0  # ipg: the line its gap is counted on
    gap: int = 0  # ipg: byte times after each frame
    flows: int = 1  # fq: the streams sharing the rate; each is paced at rate / flows

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Applied:
        start = d["owner_start"]
        return cls(
            ifname=str(d["ifname"]),
            netns=None if d["netns"] is None else str(d["netns"]),
            ifindex=int(d["ifindex"]),
            kind=str(d["kind"]),
            handle=int(d["handle"]),
            rate_bps=int(d["rate_bps"]),
            burst_bytes=int(d["burst_bytes"]),
            limit_bytes=int(d["limit_bytes"]),
            previous_kind=str(d["previous_kind"]),
            previous_handle=int(d["previous_handle"]),
            owner_pid=int(d["owner_pid"]),
            owner_start=None if start is None else int(start),
            state_file=str(d["state_file"]),
            line_rate_bps=int(d.get("line_rate_bps", 0)),
            gap=int(d.get("gap", 0)),
            flows=int(d.get("flows", 1)),
        )


# ------------------------------------------------------------------ owners


def proc_start_time(pid: int) -> int | None:
    """Start time of ``pid`` (clock ticks since boot); None if gone or a zombie.
    With the PID it identifies a process even after the PID is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else int(fields[19])


def owner_alive(applied: Applied) -> bool:
    start = proc_start_time(applied.owner_pid)
    return start is not None and (applied.owner_start is None or start == applied.owner_start)


# ------------------------------------------------------------------ state files


def state_path(state_dir: Path, netns: str | None, ifindex: int) -> Path:
    """One file per (namespace, ifindex): at most one pacing qdisc per device."""
    where = "root" if netns is None else f"ns-{netns}"
    return state_dir / f"{where}-if{ifindex}.json"


def read_state(path: Path) -> Applied:
    return Applied.from_dict(json.loads(path.read_text()))


def _save(applied: Applied) -> None:
    path = Path(applied.state_file)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(applied.to_dict(), indent=1) + "\n").encode())


# ------------------------------------------------------------------ kinds


def fq_available(refresh: bool = False) -> bool:
    """Whether this kernel has sch_fq; probed once in a scratch namespace, then cached."""
    if "fq" not in _probed or refresh:
        try:
            _probed["fq"] = _tc.probe_qdisc("fq")
        except OSError as e:
            raise PacingError(f"cannot probe for sch_fq: {e}") from e
    return _probed["fq"]


def ipg_available() -> bool:
    """Whether kmod-pacing's ipg module is loaded, or installed where modprobe finds it."""
    if Path("/sys/module/sch_ipg").exists():
        return True
    if shutil.which("modprobe") is None:
        return False
    found = subprocess.run(["modprobe", "--dry-run", "--quiet", "sch_ipg"], check=False)
    return found.returncode == 0


def choose_kind(kind: str = "auto") -> str:
    """``"auto"``: ipg where the module is present, else fq where the kernel has it,
    else :data:`DEFAULT_KIND`."""
    if kind == "auto":
        if ipg_available():
            return "ipg"
        return "fq" if fq_available() else DEFAULT_KIND
    if kind not in KINDS:
        raise ValueError(f"unknown pacing qdisc {kind!r} (one of auto, {', '.join(KINDS)})")
    return kind


def _check_rate(rate_bps: int, kind: str) -> None:
    if isinstance(rate_bps, bool) or not isinstance(rate_bps, int) or rate_bps < 8:
        raise ValueError(f"pacing rate must be an integer >= 8 bit/s, not {rate_bps!r}")
    if kind in ("tbf", "fq") and rate_bps > MAX_RATE_32:
        raise ValueError(f"{kind} takes at most {MAX_RATE_32} bit/s, not {rate_bps} (use htb)")


def burst_bytes(mtu: int, rate_bytes: int) -> int:
    """The token bucket: :data:`BURST_SECONDS` at the rate, within one and
    :data:`MAX_BURST_FRAMES` frames (see the module docstring), plus 1 us at the
    rate so the kernel's rounding of the bucket to its clock ticks never makes it
    smaller than a frame (TBF would drop frames larger than its bucket)."""
    frame = mtu + FRAME_OVERHEAD
    bucket = min(max(frame, int(rate_bytes * BURST_SECONDS)), MAX_BURST_FRAMES * frame)
    return bucket + math.ceil(rate_bytes / 1e6)


def queue_bytes(rate_bytes: int) -> int:
    return max(MIN_QUEUE_BYTES, int(rate_bytes * QUEUE_SECONDS))


# ------------------------------------------------------------------ apply / remove


def apply(
    ifname: str,
    rate_bps: int,
    netns: str | None = None,
    *,
    kind: str = "auto",
    burst: int | None = None,
    line_rate_bps: int | None = None,
    flows: int = 1,
    state_dir: Path = STATE_DIR,
) -> Applied:
    """Pace ``ifname`` (in ``netns``) at ``rate_bps`` bit/s with a root qdisc.

    ``burst`` (bytes, tbf/htb) overrides :func:`burst_bytes`. ``flows`` (fq) is how
    many streams share the rate: fq paces each flow at ``rate_bps / flows``, since its
    maxrate caps flows, not their sum (the other kinds cap the sum and ignore it). ``line_rate_bps``
    (ipg) is the line the gap is counted on: the NIC's speed where None and the
    kernel says it, else the rate itself with no gap (each frame then waits exactly
    its own time at the rate). Raises ValueError
    for a bad rate, burst or kind, DeviceNotFoundError, QdiscBusyError if the
    device already has a non-default root qdisc (ours from a live owner, or
    anybody's), PacingError if the kernel refuses.
    """
    kind = choose_kind(kind)
    _check_rate(rate_bps, kind)
    if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int) or burst < 64):
        raise ValueError(f"burst must be an integer >= 64 bytes, not {burst!r}")
    if isinstance(flows, bool) or not isinstance(flows, int) or flows < 1:
        raise ValueError(f"flows must be an integer >= 1, not {flows!r}")
    with _tc.netlink(netns) as ipr:
        index = _tc.ifindex(ipr, ifname, netns)
        path = state_path(state_dir, netns, index)
        _claim(path, ifname)
        prev = _tc.root_qdisc(ipr, index)
        if prev.handle != 0:
            raise QdiscBusyError(
                f"{ifname} already has root qdisc {prev.kind} {prev.handle >> 16:x}: "
                "installed by someone else; not replacing it"
            )
        applied = _planned(
            ifname=ifname,
            netns=netns,
            index=index,
            kind=kind,
            rate_bps=rate_bps,
            burst=burst,
            mtu=_tc.mtu(ipr, index),
            prev=prev,
            path=path,
            line_rate_bps=line_rate_bps or (nic_speed(ifname, netns) if kind == "ipg" else None),
            flows=flows if kind == "fq" else 1,
        )
        _save(applied)
        try:
            _install(ipr, applied)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
    log.info("paced %s at %d bit/s with %s (was %s)", ifname, applied.rate_bps, kind, prev.kind)
    return applied


def _claim(path: Path, ifname: str) -> None:
    """Refuse a device a live owner paces; clear what a dead one left first."""
    if not path.exists():
        return
    old = read_state(path)
    if owner_alive(old):
        raise QdiscBusyError(f"{ifname} is already paced by PID {old.owner_pid} ({path})")
    remove(old)


def _planned(
    *,
    ifname: str,
    netns: str | None,
    index: int,
    kind: str,
    rate_bps: int,
    burst: int | None,
    mtu: int,
    prev: _tc.RootQdisc,
    path: Path,
    line_rate_bps: int | None = None,
    flows: int = 1,
) -> Applied:
    rate_bytes = rate_bps // 8  # rounded down: never above the plan
    line, gap = ipg_setting(rate_bytes, mtu, line_rate_bps) if kind == "ipg" else (0, 0)
    if kind in ("fq", "ipg"):
        burst = 0
    elif burst is None:
        burst = burst_bytes(mtu, rate_bytes)
    limit = queue_bytes(rate_bytes) if kind == "tbf" else 0
    pid = os.getpid()
    return Applied(
        ifname=ifname,
        netns=netns,
        ifindex=index,
        kind=kind,
        handle=HANDLE,
        rate_bps=rate_bytes * 8,
        burst_bytes=burst,
        limit_bytes=limit,
        previous_kind=prev.kind,
        previous_handle=prev.handle,
        owner_pid=pid,
        owner_start=proc_start_time(pid),
        state_file=str(path),
        line_rate_bps=line * 8,
        gap=gap,
        flows=flows,
    )


def nic_speed(ifname: str, netns: str | None) -> int | None:
    """The NIC's speed in bit/s where the kernel knows it (ours: sysfs shows only this
    namespace's devices), else None."""
    if netns is not None:
        return None
    try:
        mbit = int(Path(f"/sys/class/net/{ifname}/speed").read_text())
    except (OSError, ValueError):
        return None
    return mbit * 1_000_000 if mbit > 0 else None


def ipg_setting(rate_bytes: int, mtu: int, line_rate_bps: int | None) -> tuple[int, int]:
    """(line rate in bytes/s, gap in byte times) that let full frames through at no
    more than ``rate_bytes``, counted as tbf counts them: the gap on the NIC's line
    where it is known and faster, else a line of the rate's own wire time, no gap."""
    frame = mtu + _tc.ETH_HEADER
    wire = frame + _tc.IPG_OVERHEAD
    line = (line_rate_bps or 0) // 8
    if line * frame >= rate_bytes * wire:
        gap = math.ceil(line * frame / rate_bytes) - wire
        return line, max(gap, 0)
    return math.ceil(rate_bytes * wire / frame), 0


def _install(ipr: Any, a: Applied) -> None:
    dev = (a.ifindex, a.ifname, a.netns)
    rate_bytes = a.rate_bps // 8
    if a.kind == "ipg":
        _tc.add_ipg(ipr, dev, a.handle, a.line_rate_bps // 8, a.gap)
    elif a.kind == "tbf":
        _tc.add_tbf(ipr, dev, a.handle, rate_bytes, burst=a.burst_bytes, limit=a.limit_bytes)
    elif a.kind == "htb":
        _tc.add_htb(ipr, dev, a.handle, rate_bytes, a.burst_bytes)
    else:
        _tc.add_fq(ipr, dev, a.handle, max(rate_bytes // a.flows, 1))


def remove(applied: Applied) -> bool:
    """Delete the root qdisc ``applied`` installed, if it is still there (same
    handle and kind), so the kernel attaches its default again; drop the state
    file. False when there was nothing of ours left to delete."""
    try:
        with _tc.netlink(applied.netns) as ipr:
            removed = _remove_root(ipr, applied)
    except DeviceNotFoundError:
        removed = False  # the namespace is gone, and our qdisc with it
    Path(applied.state_file).unlink(missing_ok=True)
    return removed


def _remove_root(ipr: Any, a: Applied) -> bool:
    if not _tc.has_index(ipr, a.ifindex):
        return False
    root = _tc.root_qdisc(ipr, a.ifindex)
    if (root.kind, root.handle) != (a.kind, a.handle):
        log.warning(
            "root qdisc of %s is %s %x:, not our %s: leaving it",
            a.ifname,
            root.kind,
            root.handle >> 16,
            a.kind,
        )
        return False
    _tc.delete_root(ipr, (a.ifindex, a.ifname, a.netns), a.handle)
    return True


def current(ifname: str, netns: str | None = None) -> Qdisc:
    """The root qdisc of ``ifname`` read back over netlink, rate in bit/s (tbf, htb,
    ipg; fq: its maxrate, what each flow may send)."""
    with _tc.netlink(netns) as ipr:
        root = _tc.root_qdisc(ipr, _tc.ifindex(ipr, ifname, netns))
    rate = None if root.rate_bytes is None else root.rate_bytes * 8
    return Qdisc(root.kind, root.handle, rate)


def cleanup_stale(state_dir: Path = STATE_DIR) -> list[Applied]:
    """Undo what crashed runs left: for every state file whose owner process is
    gone, remove its qdisc (if still ours) and the file. Files of live owners,
    and files that cannot be read, are left alone."""
    cleaned: list[Applied] = []
    for path in sorted(state_dir.glob("*.json")):
        try:
            applied = read_state(path)
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("unreadable pacing state %s left alone: %s", path, e)
            continue
        if owner_alive(applied):
            continue
        try:
            remove(applied)
        except PacingError as e:
            log.warning("stale pacing of %s not removed: %s", applied.ifname, e)
            continue
        cleaned.append(applied)
    return cleaned
