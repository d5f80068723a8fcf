"""The outcome of a copy: totals, per-stream and per-path figures, the root hash."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import xxhash

from reservoir.agent.transfer._paths import PathReport
from reservoir.agent.transfer._stream import StreamStats


def root_hash(digests: Sequence[bytes]) -> str:
    """xxh3-128 of the extent digests concatenated in extent order, in hex."""
    return xxhash.xxh3_128_hexdigest(b"".join(digests))


@dataclass
class PathStats:
    path: str
    streams: int = 0
    streams_up: int = 0
    bytes: int = 0
    extents: int = 0
    retries: int = 0


@dataclass
class CopySummary:
    source: str
    dest: str
    offset: int
    length: int
    extent_size: int
    elapsed: float
    root_hash: str
    verified: bool
    copied_bytes: int  # extents completed by this run
    skipped_extents: int  # already done according to the checkpoint
    skipped_bytes: int
    resent_bytes: int  # sent twice: in flight at the last checkpoint, resent to verify,
    # or reissued by a session after its connection was lost
    mismatches: int
    checkpoint: str
    streams: list[StreamStats] = field(default_factory=list)
    # how the whole destination was checked at the end: "destination" (it hashed its
    # own copy: HASH RANGE), "read-back", or "destination and read-back" (several)
    verified_by: str = ""
    path_reports: list[PathReport] = field(default_factory=list)  # with 2+ paths
    end_mismatches: int = 0  # extents the check at the end found different (resent)
    # how the destination LUNs were held: "reservation" (no other initiator could
    # write them), "registration" (other Reservoir copies were kept out; the target
    # lets only one session write under a reservation), "" (not held)
    hold: str = ""
    mode: str = ""  # how it was verified: "storage", "receipt" ("": not verified)
    sessions_opened: int = 0  # iSCSI sessions its streams and probe logged in
    sessions_reused: int = 0  # warm sessions taken from the agent's pool instead
    jump_started: int = 0  # streams whose connection started at its paced rate, not slow
    first_write: float | None = None  # s from the copy being asked for to its first write
    extents: int = 0  # in the copy's range, those done by an earlier run included
    # what showed the source unchanged from before its first read to the end of the
    # copy ("": not watched: a remote source whose target keeps no change mark, or a
    # copy that verified nothing)
    source_watched: str = ""
    # the source's mark moved during the copy, and the source hashed again at the end
    # was equal to what was sent, extent by extent (what "verified" then rests on)
    source_rehashed: bool = False
    # a remote source nothing watches, read again at the end (--recheck-source) and
    # equal, extent by extent, to what was sent
    source_reread: bool = False
    # the times a destination was not held while the copy wrote it (a target that
    # restarted, a CLEAR by another initiator: _hold_watch), each in words
    hold_lapses: list[str] = field(default_factory=list)
    # extents an earlier run did that the source, written since, no longer matched when
    # this run began (hashed again): sent again; the rest were skipped
    changed_since_checkpoint: int = 0
    # in flight when an earlier run stopped, and found on the destination as the
    # source has them (its digest): checked, not sent again
    found_bytes: int = 0

    @property
    def verification(self) -> str:
        """What "verified" means for this copy, in one phrase."""
        if not self.verified:
            return "not verified"
        how = {
            "destination": "hashed by the destination (HASH RANGE)",
            "read-back": "read back and hashed",
            "destination and read-back": (
                "hashed by the destinations that can, read back and hashed elsewhere"
            ),
        }.get(self.verified_by, "checked")
        kept = sum(s.end_by_read_back for s in self.streams)
        unchanged = (
            f"{kept} of {self.extents} found unchanged since the destination read them "
            f"back from storage (its read-backs: nothing read again)"
            if kept
            else ""
        )
        if self.mode != "receipt":
            if not kept:  # the one check of each extent's storage
                return f"whole destination range {how} after the last extent: equal to the source"
            rest = "" if kept == self.extents else f", the rest {how}"
            return (
                f"every extent hashed from the destination's storage as it was written; "
                f"after the last extent, {unchanged}{rest}: equal to the source"
            )
        by_receipt = sum(s.by_receipt for s in self.streams)
        again = sum(s.end_by_receipt for s in self.streams)
        done = sum(s.extents for s in self.streams)
        return (
            f"{by_receipt} of {done} extents checked by the destination's receipts of what it "
            f"received as they were written, the others hashed from storage; after the last "
            f"extent, {again} of {self.extents} checked again by those receipts (no change "
            f"over them since), {unchanged + ', ' if kept else ''}and the rest {how}: equal to "
            f"the source"
        )

    @property
    def rate(self) -> float:
        """Bytes per second copied by this run."""
        return self.copied_bytes / self.elapsed if self.elapsed > 0 else 0.0

    def paths(self) -> list[PathStats]:
        found: dict[str, PathStats] = {}
        for s in self.streams:
            p = found.setdefault(s.path, PathStats(s.path))
            p.streams += 1
            p.streams_up += s.up
            p.bytes, p.extents, p.retries = (
                p.bytes + s.bytes,
                p.extents + s.extents,
                p.retries + s.retries,
            )
        return list(found.values())


def _table(
    header: Sequence[str], rows: Sequence[Sequence[object]], *, text_last: bool = False
) -> list[str]:
    """Rows in columns as wide as their widest cell: the first left-aligned (a stream,
    a path), the figures right-aligned, the last left-aligned where it is text."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    last = len(header) - 1 if text_last else 0
    return [
        "  ".join(
            c.ljust(w) if i in (0, last) else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in cells
    ]


def format_summary(s: CopySummary) -> str:
    streams = []
    for st in s.streams:
        rate = st.bytes / st.seconds / 1e6 if st.seconds else 0.0
        state = "ok" if st.up else f"lost: {st.error}"
        streams.append(
            [f"{st.index} ({st.path})", st.bytes, f"{rate:.1f}", st.extents, st.retries, state]
        )
    header = ["stream", "bytes", "MB/s", "extents", "retries", "state"]
    lines = _table(header, streams, text_last=True)
    paths = [
        [p.path, p.bytes, f"{p.streams_up}/{p.streams}", p.extents, p.retries] for p in s.paths()
    ]
    lines += _table(["path", "bytes", "streams up", "extents", "retries"], paths)
    for r in s.path_reports:
        for at, state, reason in r.transitions:
            lines.append(f"path {r.path}: {state} at {at:.2f} s ({reason})")
        if r.moved_extents:
            window = "n/a" if r.failover_window is None else f"{r.failover_window:.2f} s"
            lines.append(
                f"path {r.path}: failover window {window} (detected after "
                f"{r.detected_after} s), {r.moved_extents} extents moved to other paths"
            )
    if s.sessions_opened or s.sessions_reused:
        lines.append(_sessions_line(s))
    if s.hold:
        lines.append(_hold_line(s))
    if s.verified:
        lines.append(_source_line(s))
    verify = (
        f"verified: {s.verification}; {s.mismatches} mismatches resent while copying, "
        f"{s.end_mismatches} at the end"
        if s.verified
        else "not verified"
    )
    lines += [
        f"copied {s.copied_bytes} bytes in {s.elapsed:.2f} s ({s.rate / 1e6:.1f} MB/s); "
        f"skipped {s.skipped_bytes} bytes ({s.skipped_extents} extents) from the checkpoint"
        f"{_changed(s)}{_found(s)}; sent twice {s.resent_bytes} bytes",
        f"root hash {s.root_hash} ({verify})",
    ]
    return "\n".join(lines)


_HOLD_LINES = {
    "reservation": "held by a persistent reservation: no other initiator could write "
    "the destination meanwhile",
    "registration": "held by registration only: other Reservoir copies were kept out, "
    "other initiators were not (the target lets only one session write under a "
    "reservation)",
}


def _hold_line(s: CopySummary) -> str:
    if not s.hold_lapses:
        return _HOLD_LINES[s.hold]
    after = " (the end check hashed all of it after)" if s.verified else ""
    how = _HOLD_LINES[s.hold].partition(":")[0]  # "held by a persistent reservation"
    return (
        f"{how}, but {'; '.join(s.hold_lapses)}: other initiators could write the "
        f"destination then{after}"
    )


def _source_line(s: CopySummary) -> str:
    if s.source_rehashed:
        return (
            f"source written during the copy ({s.source_watched} moved), then hashed again "
            f"at the end: every extent equal to what was sent"
        )
    if s.source_watched:
        return f"source unchanged from before its first read to the end (by {s.source_watched})"
    if s.source_reread:
        return (
            "source read again at the end (its target keeps no change mark; "
            "--recheck-source): every extent equal to what was sent"
        )
    return (
        "source not watched for changes (a remote LUN whose target keeps no change mark): "
        "the destination holds it as it was read; quiesce it, or copy a snapshot, for a "
        "copy of one moment, or --recheck-source to read it again at the end"
    )


def _changed(s: CopySummary) -> str:
    if not s.changed_since_checkpoint:
        return ""
    return (
        f", {s.changed_since_checkpoint} more that the source was written in since (hashed "
        f"again) sent again"
    )


def _found(s: CopySummary) -> str:
    if not s.found_bytes:
        return ""
    return (
        f", {s.found_bytes} bytes in flight at the last stop found on the destination "
        f"already (not sent again)"
    )


def _sessions_line(s: CopySummary) -> str:
    first = "no write" if s.first_write is None else f"first write at {s.first_write:.3f} s"
    jumped = f", {s.jump_started} started at their paced rate" if s.jump_started else ""
    return (
        f"sessions: {s.sessions_opened} logged in{jumped}, {s.sessions_reused} warm from "
        f"the agent's pool; {first} after the copy was asked for"
    )
