"""``reservoir copy SOURCE DEST``: copy a volume or a byte range over parallel streams.

SOURCE and DEST are local paths (files or block devices) or remote LUNs
``iscsi://HOST[:PORT]/IQN/LUN``.  Exit status 0 on success, 1 with a one-line
message on failure.

Several paths (``--path LOCAL=REMOTE[:PORT]``, or ``--bind LOCAL[/PREFIX]`` which
pairs LOCAL with the target portal on its subnet, found by SendTargets) are watched
for failures: a failed path's extents move to the others, and its streams come back
when a heartbeat gets through again.  ``--mptcp`` opens MPTCP sockets instead of TCP;
for the kernel to add subflows on the other links, on BOTH ends run
``ip mptcp limits set subflow 2 add_addr_accepted 2`` and on the target side
``ip mptcp endpoint add ADDR dev DEV signal`` for each of its extra addresses
(``sysctl net.mptcp.enabled=1``, the default, is needed too).

``--max-rate RATE`` (bit/s; ``800M``, ``2.5G``) paces every stream at its part of RATE
with SO_MAX_PACING_RATE, so the copy sends no more than RATE in all, IP and TCP
headers counted: TCP's own pacing does it, or sch_fq's where fq is the NIC's qdisc.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvloop

from reservoir.agent.iscsi.chap import ChapError
from reservoir.agent.iscsi.chap_options import add_chap_arguments, chap_credentials
from reservoir.agent.transfer._caps import StreamCaps
from reservoir.agent.transfer._engine import (
    DEFAULT_INITIATOR,
    VERIFICATIONS,
    CopyOptions,
    copy,
    release,
)
from reservoir.agent.transfer._errors import CopyError, RemoteUnreachableError
from reservoir.agent.transfer._plan import DEFAULT_EXTENT_SIZE, MIN_EXTENT_SIZE
from reservoir.agent.transfer._progress import ProgressPrinter, interrupted
from reservoir.agent.transfer._summary import format_summary
from reservoir.common.logs import setup_logging
from reservoir.common.sizes import parse_size, size_arg

log = logging.getLogger("reservoir.copy")

Sub = Any  # argparse's _SubParsersAction is private


def register(sub: Sub) -> None:
    p = sub.add_parser("copy", help="copy a volume over parallel iSCSI streams")
    p.add_argument("source", metavar="SOURCE", help="local path or iscsi://HOST[:PORT]/IQN/LUN")
    p.add_argument(
        "dest",
        metavar="DEST",
        nargs="+",
        help="iscsi://HOST[:PORT]/IQN/LUN or local path; several: a volume set the source is "
        "striped over (one server pair each)",
    )
    p.add_argument(
        "--streams", type=int, default=4, help="parallel streams per destination (default 4)"
    )
    p.add_argument(
        "--extent-size",
        type=extent_size_arg,
        default=DEFAULT_EXTENT_SIZE,
        metavar="SIZE",
        help=f"bytes a stream carries, hashes and checkpoints at a time: 8MiB, 512K "
        f"(default {DEFAULT_EXTENT_SIZE >> 20}MiB, at least {MIN_EXTENT_SIZE >> 10}KiB)",
    )
    p.add_argument(
        "--stripe-unit",
        type=size_arg,
        default=DEFAULT_EXTENT_SIZE,
        metavar="SIZE",
        help="with several destinations: bytes of the source per destination in turn "
        f"(default {DEFAULT_EXTENT_SIZE >> 20}MiB)",
    )
    _add_lifecycle(p)
    _add_login(p)
    _add_network(p)
    p.set_defaults(func=main)


def _add_lifecycle(p: argparse.ArgumentParser) -> None:
    """Resume, release, verification, checkpoint, range and telemetry."""
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    p.add_argument(
        "--release",
        action="store_true",
        help="copy nothing: end this copy's hold on its destinations (the persistent "
        "reservation a paused or failed copy keeps for its --resume)",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="verify nothing: neither each extent nor the whole destination at the end",
    )
    p.add_argument(
        "--verify",
        choices=VERIFICATIONS,
        default="storage",
        dest="verification",
        help="how a copy is verified: storage (each extent hashed from the destination's storage "
        "once, at the end; default) or receipt (each extent checked as it is written and again "
        "at the end by the digests of what its writes received, which the target drops at any "
        "change over them; from storage where it kept none)",
    )
    p.add_argument(
        "--recheck-source",
        action="store_true",
        help="a remote source whose target keeps no change mark (tgt, LIO): read it all "
        "again at the end and compare every extent with what was sent (a second read over "
        "the network; our target's sources are watched without it)",
    )
    p.add_argument("--checkpoint", type=Path, metavar="FILE", help="checkpoint file")
    p.add_argument(
        "--range", metavar="OFFSET:LENGTH", help="copy only this byte range (sizes: 1GiB:512M)"
    )
    p.add_argument(
        "--telemetry",
        type=Path,
        metavar="FILE",
        help="append JSON lines: per-stream TCP_INFO at 2 Hz, path states, progress",
    )


def _add_login(p: argparse.ArgumentParser) -> None:
    """How remote LUNs are logged in to."""
    p.add_argument("--initiator-name", default=DEFAULT_INITIATOR, metavar="IQN")
    add_chap_arguments(p, "--chap", "the copy logs in to remote LUNs with")
    add_chap_arguments(
        p, "--mutual-chap", "the targets must answer with, checked by the copy (needs --chap)"
    )


def _add_network(p: argparse.ArgumentParser) -> None:
    """The paths the streams take, and their sockets."""
    p.add_argument(
        "--path",
        action="append",
        default=[],
        metavar="LOCAL=REMOTE[:PORT]",
        help="a network path; streams are spread over the paths (repeatable)",
    )
    p.add_argument(
        "--bind",
        action="append",
        default=[],
        metavar="LOCAL[/PREFIX]",
        help="a path from LOCAL to the target portal on its subnet (/24 by default; repeatable)",
    )
    p.add_argument(
        "--max-rate",
        type=parse_rate,
        metavar="RATE",
        help="send at most RATE bit/s in all (k, M, G: 800M); each stream is paced at its "
        "part with SO_MAX_PACING_RATE",
    )
    p.add_argument(
        "--mptcp",
        action="store_true",
        help="MPTCP sockets; needs on both ends `ip mptcp limits set subflow 2 "
        "add_addr_accepted 2`, and on the target `ip mptcp endpoint add ADDR dev DEV signal`",
    )


def options_from(args: argparse.Namespace) -> CopyOptions:
    return CopyOptions(
        streams=args.streams,
        extent_size=args.extent_size,
        stripe_unit=args.stripe_unit,
        paths=list(args.path),
        resume=args.resume,
        verify=not args.no_verify,
        verification=args.verification,
        checkpoint=args.checkpoint,
        range=parse_range(args.range) if args.range else None,
        initiator_name=args.initiator_name,
        chap=_chap(args, "chap"),
        mutual_chap=_chap(args, "mutual_chap"),
        binds=list(args.bind),
        mptcp=args.mptcp,
        telemetry=args.telemetry,
        recheck_source=args.recheck_source,
        stream_caps=paced(args.max_rate, args.streams * len(args.dest)),
    )


RATE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
MIN_STREAM_RATE = 8_000  # bit/s: below this TCP's pacing would stall a stream


def parse_rate(text: str) -> int:
    """Bits per second from ``800M``, ``2.5G``, ``100000000`` (decimal units)."""
    number, unit = text.strip(), ""
    if number and number[-1].lower() in RATE_UNITS:
        number, unit = number[:-1], number[-1].lower()
    try:
        value = float(number) * RATE_UNITS[unit]
    except ValueError:
        value = -1.0
    if not 0 < value < 2**63:
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate in bit/s (e.g. 800M, 2.5G)")
    return int(value)


def paced(max_rate: int | None, streams: int) -> StreamCaps | None:
    """Each of ``streams`` paced at its part of ``max_rate`` bit/s (None: unpaced)."""
    if max_rate is None:
        return None
    if max_rate < MIN_STREAM_RATE * streams:
        raise CopyError(
            f"--max-rate {max_rate} bit/s over {streams} streams is below "
            f"{MIN_STREAM_RATE} bit/s a stream"
        )
    caps = StreamCaps(None)
    caps.want({}, dict.fromkeys(range(streams), max_rate // 8 // streams))
    return caps


def extent_size_arg(text: str) -> int:
    """``--extent-size``: a size of at least MIN_EXTENT_SIZE."""
    size = size_arg(text)
    if size < MIN_EXTENT_SIZE:
        raise argparse.ArgumentTypeError(
            f"{text!r}: at least {MIN_EXTENT_SIZE >> 10}KiB (an extent is a stream's unit "
            "of work, hash and checkpoint: smaller ones cost more than they carry)"
        )
    return size


def parse_range(text: str) -> tuple[int, int]:
    """``OFFSET:LENGTH``, each a size (:mod:`reservoir.common.sizes`; the offset may be 0)."""
    offset, sep, length = text.partition(":")
    try:
        if sep:
            return parse_size(offset, minimum=0), parse_size(length)
    except ValueError as exc:
        raise CopyError(f"--range {text!r}: {exc}") from None
    raise CopyError(f"--range {text!r} is not OFFSET:LENGTH")


def _chap(args: argparse.Namespace, name: str) -> tuple[str, str] | None:
    """``--chap`` or ``--mutual-chap`` (``name``) as user and secret, the secret from
    the command line (with a warning), a file only its owner may read, or the
    environment."""
    try:
        return chap_credentials(args, name, log)
    except ChapError as exc:
        raise CopyError(str(exc)) from None


UNREACHABLE_HINT = (
    "what was copied is kept in the checkpoint: once the target answers again, the same "
    "command with --resume goes on from there"
)


def main(args: argparse.Namespace) -> int:
    if args.release:
        return release_main(args)
    printer = ProgressPrinter(sys.stderr)
    try:
        options = options_from(args)
        summary = uvloop.run(copy(args.source, args.dest, options, progress=printer))
    except CopyError as exc:
        printer.finish()
        print(f"reservoir copy: {exc}", file=sys.stderr)
        if isinstance(exc, RemoteUnreachableError) and printer.last is not None:
            print(f"reservoir copy: {UNREACHABLE_HINT}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        printer.finish()
        checkpoint = str(args.checkpoint) if args.checkpoint else None
        held = any(dest.startswith("iscsi://") for dest in args.dest)
        said = interrupted(printer.last, checkpoint, held=held)
        print(f"reservoir copy: {said}", file=sys.stderr)
        return 130
    printer.finish()
    print(format_summary(summary))
    return 0


def release_main(args: argparse.Namespace) -> int:
    """``--release``: the copy's destinations it held are released and named."""
    try:
        released = uvloop.run(release(args.source, args.dest, options_from(args)))
    except CopyError as exc:
        print(f"reservoir copy: {exc}", file=sys.stderr)
        return 1
    for dest in released:
        print(f"released {dest}")
    if not released:
        print("this copy holds none of its destinations")
    return 0


def run(argv: Sequence[str] | None = None) -> int:
    """``python -m reservoir.agent.transfer.cli SOURCE DEST ...``: ``reservoir copy``
    alone, without loading the rest of the CLI (it starts in a third of the time,
    which counts in a guest under emulation: about 9 s instead of 25)."""
    parser = argparse.ArgumentParser(prog="reservoir")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["copy", *(sys.argv[1:] if argv is None else argv)])
    setup_logging(0)  # as ``reservoir copy`` logs
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(run())
