"""Apply a profile, or revert to what was there before, setting by setting.

Apply reads every setting first. Those already at the profile's value are
``unchanged``; those the kernel will refuse for a reason known in advance (no
such key, a read-only file, a congestion control the kernel lacks, no such
interface) are ``refused`` without a write. The originals of the rest are
recorded in the state file *before* anything is written (a crash half-way
still leaves a complete record), then each is written: ``changed`` or
``refused`` with the kernel's reason. A later apply keeps the recorded
originals; ``revert`` writes them back and forgets those it restored.

An optional sysctl that does not exist here (or whose value the kernel does
not know) is ``skipped``, not refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ._host import Host, HostRefusedError, same_value
from ._profile import NicSettings, Profile
from ._state import STATE_DIR, Entry, Saved, locked, read_state, state_path, write_state

CHANGED = "changed"
UNCHANGED = "unchanged"
REFUSED = "refused"
SKIPPED = "skipped"
WOULD_CHANGE = "would change"
RESULTS = (CHANGED, UNCHANGED, REFUSED, SKIPPED, WOULD_CHANGE)

EXIT_OK = 0
EXIT_REFUSED = 3


@dataclass(frozen=True)
class Outcome:
    """What happened to one setting. ``after`` is its value now (for a dry run:
    what it would become)."""

    scope: str  # sysctl | link | coalesce
    name: str
    result: str
    before: str | None = None
    after: str | None = None
    interface: str | None = None
    reason: str | None = None

    @property
    def setting(self) -> str:
        if self.scope == "sysctl":
            return self.name
        if self.scope == "coalesce":
            return f"{self.interface} coalesce {self.name}"
        return f"{self.interface} {self.name}"


@dataclass
class Report:
    action: str  # apply | revert
    netns: int
    state_file: str
    dry_run: bool = False
    profile: str | None = None
    source: str | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    note: str | None = None

    def count(self, result: str) -> int:
        return sum(1 for o in self.outcomes if o.result == result)

    @property
    def refused(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.result == REFUSED]

    @property
    def exit_code(self) -> int:
        return EXIT_REFUSED if self.refused else EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "profile": self.profile,
            "source": self.source,
            "dry_run": self.dry_run,
            "netns": self.netns,
            "state_file": self.state_file,
            "exit_code": self.exit_code,
            "counts": {r: self.count(r) for r in RESULTS},
            "note": self.note,
            "settings": [{"setting": o.setting, **asdict(o)} for o in self.outcomes],
        }


# ------------------------------------------------------------------ one setting


@dataclass(frozen=True)
class _Knob:
    """Read, check and write access to one setting."""

    scope: str
    name: str
    interface: str
    ifindex: int | None
    read: Callable[[], str]
    check: Callable[[str], None]
    write: Callable[[str], None]

    def outcome(
        self, result: str, before: str | None, after: str | None, reason: str | None = None
    ) -> Outcome:
        return Outcome(
            scope=self.scope,
            name=self.name,
            result=result,
            before=before,
            after=after,
            interface=self.interface or None,
            reason=reason,
        )

    def entry(self, value: str) -> Entry:
        return Entry(self.scope, self.name, value, self.interface, self.ifindex)


def _no_check(_value: str) -> None:
    return None


def _sysctl_knob(host: Host, key: str) -> _Knob:
    return _Knob(
        "sysctl",
        key,
        "",
        None,
        read=lambda: host.sysctl.read(key),
        check=lambda value: host.sysctl.check(key, value),
        write=lambda value: host.sysctl.write(key, value),
    )


def _link_knob(host: Host, ifname: str, attr: str, ifindex: int | None) -> _Knob:
    def read() -> str:
        state = host.links.lookup(ifname)
        if state is None:
            raise HostRefusedError(f"ENODEV: no network device {ifname} here", absent=True)
        return str(state.mtu if attr == "mtu" else state.txqueuelen)

    def write(value: str) -> None:
        if attr == "mtu":
            host.links.set(ifname, mtu=int(value))
        else:
            host.links.set(ifname, txqueuelen=int(value))

    return _Knob("link", attr, ifname, ifindex, read, _no_check, write)


def _coalesce_knob(host: Host, ifname: str, option: str, ifindex: int | None) -> _Knob:
    def read() -> str:
        options = host.coalescer.read(ifname)
        if option not in options:
            raise HostRefusedError(f"{ifname} does not report {option} (ethtool -c)", absent=True)
        return options[option]

    def write(value: str) -> None:
        host.coalescer.write(ifname, option, value)

    return _Knob("coalesce", option, ifname, ifindex, read, _no_check, write)


def _nic_knobs(host: Host, ifname: str, settings: NicSettings) -> list[tuple[_Knob, str]]:
    """(knob, wanted) for every setting of one interface; knobs of a missing
    interface refuse every read."""
    refusal = HostRefusedError(f"ENODEV: no network device {ifname} here", absent=True)
    try:
        state = host.links.lookup(ifname)
    except HostRefusedError as r:
        state, refusal = None, r
    ifindex = None if state is None else state.index
    knobs: list[tuple[_Knob, str]] = []
    if settings.mtu is not None:
        knobs.append((_link_knob(host, ifname, "mtu", ifindex), str(settings.mtu)))
    if settings.txqueuelen is not None:
        knobs.append((_link_knob(host, ifname, "txqueuelen", ifindex), str(settings.txqueuelen)))
    for option, value in settings.coalesce.items():
        knobs.append((_coalesce_knob(host, ifname, option, ifindex), value))
    if state is None:  # one reason for all, not ethtool's wording of it
        knobs = [(replace(k, read=_raising(refusal)), v) for k, v in knobs]
    return knobs


def _raising(refusal: HostRefusedError) -> Callable[[], str]:
    def read() -> str:
        raise refusal

    return read


# ------------------------------------------------------------------ apply


def apply_profile(
    profile: Profile,
    host: Host,
    *,
    interfaces: Sequence[str] | None = None,
    state_dir: Path = STATE_DIR,
    dry_run: bool = False,
) -> Report:
    """Apply ``profile`` in ``host``'s namespace; never raises for a refusal."""
    path = state_path(state_dir, host.netns)
    report = Report(
        "apply", host.netns, str(path), dry_run, profile=profile.name, source=profile.source
    )
    wanted: list[tuple[_Knob, str, bool]] = [
        (_sysctl_knob(host, s.key), s.value, s.optional) for s in profile.sysctl
    ]
    for ifname, settings in profile.nic_targets(interfaces):
        wanted += [(knob, value, False) for knob, value in _nic_knobs(host, ifname, settings)]
    if not wanted:
        report.note = "the profile sets nothing (no sysctl, no interface selected)"

    # 1. read and check everything; what is left is to be written
    pending: list[tuple[int, _Knob, str, str, bool]] = []  # slot, knob, before, value, optional
    for knob, value, optional in wanted:
        before: str | None = None
        try:
            before = knob.read()
            if same_value(before, value):
                report.outcomes.append(knob.outcome(UNCHANGED, before, before))
                continue
            knob.check(value)
        except HostRefusedError as r:
            result = SKIPPED if optional and r.absent else REFUSED
            report.outcomes.append(knob.outcome(result, before, before, r.reason))
            continue
        pending.append((len(report.outcomes), knob, before, value, optional))
        report.outcomes.append(knob.outcome(WOULD_CHANGE, before, value))
    if dry_run or not pending:
        return report

    # 2. record the originals, then write
    with locked(state_dir, host.netns):
        saved = read_state(path) or Saved()
        added = []
        for _slot, knob, before, _value, _optional in pending:
            entry = knob.entry(before)
            if entry.key not in saved.entries:
                saved.entries[entry.key] = entry
                added.append(entry.key)
        saved.profiles.append(profile.name)
        write_state(path, saved, host.netns)
        for slot, knob, before, value, optional in pending:
            try:
                knob.write(value)
            except HostRefusedError as r:
                after = _read_or(knob, before)
                result = SKIPPED if optional and r.absent else REFUSED
                report.outcomes[slot] = knob.outcome(result, before, after, r.reason)
                key = knob.entry(before).key
                if key in added and same_value(after, before):
                    del saved.entries[key]  # nothing changed: nothing to restore
                continue
            report.outcomes[slot] = knob.outcome(CHANGED, before, _read_or(knob, value))
        write_state(path, saved, host.netns)
    return report


def _read_or(knob: _Knob, default: str) -> str:
    try:
        return knob.read()
    except HostRefusedError:
        return default


# ------------------------------------------------------------------ revert


def revert(host: Host, *, state_dir: Path = STATE_DIR, dry_run: bool = False) -> Report:
    """Write back every recorded original; forget those restored (or whose
    interface is gone), keep those refused for another try."""
    path = state_path(state_dir, host.netns)
    report = Report("revert", host.netns, str(path), dry_run)
    saved = read_state(path)
    if saved is None:
        report.note = "nothing to revert: no profile applied in this network namespace"
        return report
    report.profile = " + ".join(saved.profiles) or None
    if dry_run:
        for entry in saved.entries.values():
            report.outcomes.append(_revert_one(host, entry, dry_run=True))
        return report
    with locked(state_dir, host.netns):
        saved = read_state(path) or Saved()
        for key, entry in list(saved.entries.items()):
            outcome = _revert_one(host, entry, dry_run=False)
            report.outcomes.append(outcome)
            if outcome.result != REFUSED:
                del saved.entries[key]
        if not saved.entries:
            saved.profiles.clear()
        write_state(path, saved, host.netns)
    return report


def _revert_one(host: Host, entry: Entry, *, dry_run: bool) -> Outcome:
    if entry.scope == "sysctl":
        knob = _sysctl_knob(host, entry.name)
    else:
        try:
            state = host.links.lookup(entry.interface)
        except HostRefusedError as r:
            return Outcome(
                entry.scope, entry.name, REFUSED, interface=entry.interface, reason=r.reason
            )
        if state is None or (entry.ifindex is not None and state.index != entry.ifindex):
            gone = "is gone" if state is None else f"is another device now (ifindex {state.index})"
            return Outcome(
                entry.scope,
                entry.name,
                SKIPPED,
                after=None,
                interface=entry.interface,
                reason=f"{entry.interface} {gone}: nothing to restore",
            )
        if entry.scope == "link":
            knob = _link_knob(host, entry.interface, entry.name, state.index)
        else:
            knob = _coalesce_knob(host, entry.interface, entry.name, state.index)
    before: str | None = None
    try:
        before = knob.read()
        if same_value(before, entry.value):
            return knob.outcome(UNCHANGED, before, before)
        knob.check(entry.value)
        if dry_run:
            return knob.outcome(WOULD_CHANGE, before, entry.value)
        knob.write(entry.value)
    except HostRefusedError as r:
        after = None if before is None else _read_or(knob, before)
        return knob.outcome(REFUSED, before, after, r.reason)
    return knob.outcome(CHANGED, before, _read_or(knob, entry.value))


# ------------------------------------------------------------------ output


def format_table(report: Report) -> str:
    """The report for people: a summary line, then setting / before / after / result."""
    what = f"profile {report.profile}" if report.action == "apply" else "revert"
    if report.action == "revert" and report.profile:
        what = f"revert of {report.profile}"
    head = f"{what} in netns {report.netns}"
    if report.dry_run:
        head += " (dry run: nothing written)"
    counts = ", ".join(f"{report.count(r)} {r}" for r in RESULTS if report.count(r))
    lines = [f"{head}: {counts or 'nothing to do'}"]
    if report.note:
        lines.append(report.note)
    if not report.outcomes:
        return "\n".join(lines) + "\n"
    rows = [("setting", "before", "after", "result")]
    for o in report.outcomes:
        result = o.result if o.reason is None else f"{o.result}: {o.reason}"
        rows.append((o.setting, o.before or "-", o.after or "-", result))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        cells = [row[i].ljust(widths[i]) for i in range(3)]
        lines.append("  ".join([*cells, row[3]]))
    if not report.dry_run and report.action == "apply" and report.count(CHANGED):
        lines.append(f"originals recorded in {report.state_file}")
    return "\n".join(lines) + "\n"
