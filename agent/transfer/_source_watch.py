"""A copy's watch on its source: marked before its first read, checked at the end.

A source written while it is copied leaves the destination holding each extent as it
was read, which is not the source at any one moment. :class:`SourceWatch` takes the
source's change mark (:mod:`reservoir.agent.storage._changes`; a remote source's as
its target reads it) before the first read and again at the end. Where it moved, the
source is hashed again (:mod:`._source_changes`): equal extent by extent, the copy
is verified all the same; different, it fails with :class:`SourceChangedError`
naming the extents, and its checkpoint forgets just those.

A resume whose source moved since its checkpoint was saved sorts the done extents
the same way before it starts (:func:`recheck_moved`); where it cannot, the run's
watch puts them back in flight to be looked for on the destination.

A remote source on a target that keeps no change mark (tgt, LIO) cannot be watched.
With ``recheck`` (``--recheck-source``) it is read again at the end, every extent,
and compared with what was sent: a second read of the whole source over the network,
the only way to know there that the destination equals the source as it now is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from reservoir.agent.initiator import InitiatorError, Session
from reservoir.agent.storage import ChangeMark, StorageError
from reservoir.agent.transfer._checkpoint import Checkpoint
from reservoir.agent.transfer._endpoints import (
    NO_MARK,
    Channel,
    LocalSide,
    RemoteSide,
    Side,
    remote_change_mark,
    remote_rehasher,
    reread_rehasher,
    source_session,
)
from reservoir.agent.transfer._errors import SourceChangedError
from reservoir.agent.transfer._plan import Extent, Plan
from reservoir.agent.transfer._source_changes import (
    Rehasher,
    SourceChanges,
    find_changes,
    local_rehasher,
    recheck_moved_source,
)

log = logging.getLogger("reservoir.copy")

_CANNOT_HASH = (InitiatorError, StorageError, OSError, TimeoutError)


class SourceWatch:
    """One run's watch on its source. ``changes_since`` is what :func:`recheck_moved`
    found before the run; ``phase`` logs where the copy is."""

    def __init__(
        self,
        src: Side,
        plan: Plan,
        checkpoint: Checkpoint,
        *,
        verify: bool,
        changes_since: SourceChanges | None,
        phase: Callable[[str], None],
        recheck: bool = False,
    ) -> None:
        self.src, self.plan, self.checkpoint = src, plan, checkpoint
        self.verify, self.phase, self.recheck = verify, phase, recheck
        self.first = first_mark(src)  # before the first read
        # extents an earlier run did that the source no longer matched (sent again)
        self.changed_since: tuple[Extent, ...] = changes_since.changed if changes_since else ()
        self.rehashed = False  # written during the copy, and found equal at the end
        self.reread = False  # unwatched, read again at the end and found equal (recheck)
        self._distrust_if_moved()

    def _distrust_if_moved(self) -> None:
        """A resumed copy whose source was written since the run that saved the
        checkpoint, and could not be sorted: the extents that run did go back in
        flight (see Checkpoint.watch_source)."""
        moved = self.checkpoint.watch_source(self.first)
        if moved:
            log.warning(
                "copy to %s: %s changed since the checkpoint was saved (%s moved): its %d "
                "done extents are checked against the destination again",
                self.checkpoint.key.dest,
                self.src.label,
                self.first.how if self.first else "",
                moved,
            )

    def watched(self, end_checked: bool) -> str:
        """What showed the source unchanged from before its first read to the end."""
        mark = self.first
        return mark.how if mark is not None and self.verify and end_checked else ""

    async def check(self, kept: Sequence[Channel]) -> None:
        """At the end, over the source channels still open (``kept``): raises
        SourceChangedError where the source was written while it was copied and is
        not equal to what was sent (or a remote source's mark can no longer be read),
        which "verified, equal to the source" would misstate. A copy that verifies
        nothing claims nothing."""
        mark = self.first
        if not self.verify:
            return
        if mark is None:
            if self.recheck:
                await self._reread(kept)
            return
        now = await self._mark_now(kept)
        if now is None:
            raise SourceChangedError(
                f"{self.src.label}: its change mark could not be read again at the end, so "
                f"nothing shows it unchanged while it was copied; resume to check it again"
            )
        if not mark.moved(now):
            return
        source = self._rehasher(kept)
        changes = None if source is None else await self._find_changes(source, now)
        if changes is not None and not changes.changed:
            self.rehashed = True
            self.phase("the source, written meanwhile, hashed again: equal to what was sent")
            return
        tried = source is not None
        raise SourceChangedError(changed_message(self.src.label, mark, changes, tried))

    async def _reread(self, kept: Sequence[Channel]) -> None:
        """A source nothing can watch, read again and compared extent by extent
        (``recheck``): equal, the copy is verified against the source as it now is;
        different, it fails naming the extents, and its checkpoint forgets them."""
        found = _first_session(kept)
        if not isinstance(self.src, RemoteSide) or found is None:
            log.warning("%s cannot be read again here: not checked for changes", self.src.label)
            return
        self.phase("reading the source again (--recheck-source)")
        source = reread_rehasher(*found, self.src.block_size, self.src.label)
        try:
            changes = await find_changes(source, self.plan, self.checkpoint.done, NO_MARK)
        except _CANNOT_HASH as exc:
            raise SourceChangedError(
                f"{self.src.label} could not be read again at the end (--recheck-source): "
                f"{exc}; resume to read it again"
            ) from exc
        assert changes is not None  # a mark that never moves
        if changes.changed:
            self.checkpoint.forget(changes.ids, NO_MARK)
            raise SourceChangedError(
                f"{self.src.label} read again at the end differs from what was sent: "
                f"{changes.describe()}; its target keeps no change mark, so it was written "
                "while it was copied; copy a source nothing writes meanwhile (quiesced, or "
                "a snapshot), or resume to send just those"
            )
        self.reread = True
        self.phase("the source, read again: equal to what was sent")

    async def _mark_now(self, kept: Sequence[Channel]) -> ChangeMark | None:
        """The source's mark now: a local one's own; a remote one's from its target, over
        a stream's session still open (the end keeps one per server pair); None where
        none is."""
        if isinstance(self.src, LocalSide):
            return self.src.change_mark()
        found = _first_session(kept)
        return None if found is None else await remote_change_mark(*found)

    def _rehasher(self, kept: Sequence[Channel]) -> Rehasher | None:
        """How the source can be hashed again: a local one read, a remote one on our
        target asked to hash its extents over a session still open; None for a remote
        one whose target cannot."""
        if isinstance(self.src, LocalSide):
            return local_rehasher(self.src.volume)
        found = _first_session(kept)
        if not (isinstance(self.src, RemoteSide) and self.src.hashes) or found is None:
            return None
        return remote_rehasher(*found, self.src.block_size, self.src.label)

    async def _find_changes(self, source: Rehasher, now: ChangeMark) -> SourceChanges | None:
        """The source written while it was copied, hashed again: the extents that
        differ from what was sent leave the checkpoint, so a resume sends just those.
        None where it cannot tell (written meanwhile again, or unreadable). ``now``
        is its mark as just read."""
        self.phase("the source was written meanwhile: hashing it again")
        try:
            changes = await find_changes(source, self.plan, self.checkpoint.done, now)
        except _CANNOT_HASH as exc:
            log.warning("%s could not be hashed again: %s", self.src.label, exc)
            return None
        if changes is not None:
            self.checkpoint.forget(changes.ids, changes.mark)
        return changes


async def recheck_moved(src: Side, plan: Plan, checkpoint: Checkpoint) -> SourceChanges | None:
    """A resume whose source moved since its checkpoint was saved, hashed again to
    sort the done extents (see recheck_moved_source): a local source read, a remote
    one on our target asked over a session of its own. None where it did not move or
    cannot tell: the done extents are then looked for on the destination again."""
    session = None
    try:
        if isinstance(src, LocalSide):
            return await recheck_moved_source(local_rehasher(src.volume), plan, checkpoint)
        earlier = checkpoint.source_mark
        if not isinstance(src, RemoteSide) or not src.hashes or src.mark is None:
            return None
        if earlier is None or not earlier.moved(src.mark):
            return None
        session = await src.asking_session()
        source = remote_rehasher(session, src.where.lun, src.block_size, src.label)
        return await recheck_moved_source(source, plan, checkpoint)
    except _CANNOT_HASH as exc:
        log.warning("%s could not be hashed again: %s", src.label, exc)
        return None
    finally:
        if session is not None and isinstance(src, RemoteSide):
            await src.retire(session)


def changed_message(
    label: str, mark: ChangeMark, changes: SourceChanges | None, tried: bool
) -> str:
    """Why a copy whose source moved is not verified, and what to do (``tried``: the
    source was hashed again, and ``changes`` is what that found, if anything)."""
    where, resume = "", "resume to send what changed"
    if changes is not None:
        where, resume = f": {changes.describe()}", "resume to send just those"
    elif tried:
        where = (
            ", and it could not be hashed again while unchanged (still being written, or "
            "unreadable: see the log)"
        )
    return (
        f"{label} changed while it was copied ({mark.how} moved){where}; the destination "
        f"holds each extent as it was read, not the source as it is now; copy a source "
        f"nothing writes meanwhile (quiesced, or a snapshot), or {resume} (--no-verify "
        f"copies it without this check)"
    )


def first_mark(src: Side) -> ChangeMark | None:
    """The source's change mark before its first read (a remote one's, as probed)."""
    if isinstance(src, LocalSide):
        return src.change_mark()
    return src.mark if isinstance(src, RemoteSide) else None


def _first_session(kept: Sequence[Channel]) -> tuple[Session, int] | None:
    for channel in kept:
        found = source_session(channel)
        if found is not None:
            return found
    return None
