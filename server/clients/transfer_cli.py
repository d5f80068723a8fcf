"""``reservoir transfer start|list|status|watch|pause|resume|cancel``: transfers on the coordinator.

Global options (before or after the action): ``--server URL`` (default
``$RESERVOIR_SERVER_URL``, else ``http://127.0.0.1:8470``), ``--token TOKEN`` (default
``$RESERVOIR_TOKEN``; never printed) and ``--json`` (machine output; ``watch`` writes
one JSON line per sample).

Exit status: 0 on success (``watch``: the transfer completed), 1 when the coordinator
refuses or cannot be reached, or ``watch`` saw the transfer fail or be cancelled, with
a one-line message (and ``field.path: message`` lines for a 422), 2 for usage errors.

Progress is what the API reports (``done_bytes`` of the transfer and its legs; a
completed leg or transfer counts whole). ``list`` shows the API's rate and ETA (since
the transfer last began running; ``-`` when not running); ``watch`` computes the rate
from its own successive samples.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TextIO, TypeVar

from reservoir.server.app import leg_summary
from reservoir.server.clients.errors import ClientError

if TYPE_CHECKING:  # imported on use: other ``reservoir`` commands must not pay for httpx
    from pydantic import BaseModel

    from reservoir.server.app.models import (
        LegPublic,
        TransferCreate,
        TransferEventPublic,
        TransferPublic,
    )
    from reservoir.server.clients.client import CoordinatorClient

__all__ = [
    "DEFAULT_SERVER",
    "ENV_SERVER",
    "ENV_TOKEN",
    "EXIT_STATUS",
    "RateMeter",
    "Sample",
    "done_bytes",
    "format_list",
    "format_progress_line",
    "format_table",
    "main",
    "register",
]

Sub = Any  # argparse's _SubParsersAction is private

DEFAULT_SERVER = "http://127.0.0.1:8470"
ENV_SERVER = "RESERVOIR_SERVER_URL"
ENV_TOKEN = "RESERVOIR_TOKEN"
PROG = "reservoir transfer"
EXIT_STATUS = {"completed": 0, "failed": 1, "cancelled": 1}  # where ``watch`` stops
BAR_WIDTH = 24
RATE_WINDOW = 10.0  # seconds of samples the rate is computed over
PLAIN_INTERVAL = 5.0  # off a terminal, a line at most this often unless something changed
DASH = "-"
VERIFICATIONS = ("storage", "receipt")  # TransferBase.verification
ID_LENGTH = 36  # a transfer's id: a UUID
MIN_PREFIX = 4  # characters of an id that may stand for it
ID_CHARACTERS = frozenset("0123456789abcdef-")
ID_HELP = f"the transfer's id, or its first characters ({MIN_PREFIX} at least)"


# ---------------------------------------------------------------- arguments


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def common_options() -> argparse.ArgumentParser:
    """Options accepted before and after the action (SUPPRESS: the later one wins)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--server",
        metavar="URL",
        default=argparse.SUPPRESS,
        help=f"the coordinator (default ${ENV_SERVER}, else {DEFAULT_SERVER})",
    )
    p.add_argument(
        "--token", default=argparse.SUPPRESS, help=f"a user's bearer token (default ${ENV_TOKEN})"
    )
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine output")
    return p


def register(sub: Sub) -> None:
    common = common_options()
    p = sub.add_parser(
        "transfer",
        parents=[common],
        help="start, list, watch, pause, resume and cancel transfers on the coordinator",
        description="Transfers on the coordinator's API.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    _register_start(actions, common)
    listing = actions.add_parser("list", parents=[common], help="the transfers, one a line")
    listing.add_argument(
        "--state", action="append", default=[], metavar="STATE", help="any of (repeatable)"
    )
    _label_option(listing, "KEY[=VALUE]", "transfers with this label (repeatable: all of them)")
    listing.add_argument("--agent", metavar="AGENT", help="an agent (name or id) of either set")
    status = actions.add_parser("status", parents=[common], help="a transfer, its legs, events")
    status.add_argument("id", metavar="ID", help=ID_HELP)
    status.add_argument(
        "--events", type=int, default=10, metavar="N", help="last N events (default 10)"
    )
    watch = actions.add_parser(
        "watch", parents=[common], help="live progress until the transfer ends"
    )
    watch.add_argument("id", metavar="ID", help=ID_HELP)
    _interval_option(watch)
    for action in ("pause", "resume", "cancel"):
        a = actions.add_parser(action, parents=[common], help=f"{action} a transfer")
        a.add_argument("id", metavar="ID", help=ID_HELP)
    p.set_defaults(func=main)


def _register_start(actions: Sub, common: argparse.ArgumentParser) -> None:
    s = actions.add_parser("start", parents=[common], help="queue a transfer")
    s.add_argument("--from", dest="source", required=True, metavar="VOLUME_SET", help="name or id")
    s.add_argument("--to", dest="dest", required=True, metavar="VOLUME_SET", help="name or id")
    s.add_argument(
        "--streams", type=_positive_int, metavar="N", help="streams per server pair (default 8)"
    )
    s.add_argument(
        "--path",
        dest="paths",
        action="append",
        default=[],
        metavar="LINK",
        help="a link (name or id) the streams use; repeatable",
    )
    s.add_argument("--pacing", choices=["off", "per-nic", "per-socket"], help="default per-nic")
    s.add_argument("--margin", type=float, metavar="X", help="share left unused (default 0.05)")
    s.add_argument(
        "--equalizer", action=argparse.BooleanOptionalAction, help="default: equalizer on"
    )
    _verify_options(s)
    s.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="names this request: sent again with the same key (by a script, or by this "
        "command after a lost answer), it returns the transfer it made (default: a new UUID)",
    )
    _label_option(s, "KEY=VALUE", "a label of the transfer (repeatable)")
    s.add_argument("--watch", action="store_true", help="then watch it until it ends")
    _interval_option(s)


def _label_option(p: argparse.ArgumentParser, metavar: str, help_text: str) -> None:
    p.add_argument(
        "--label", dest="labels", action="append", default=[], metavar=metavar, help=help_text
    )


def _verify_options(p: argparse.ArgumentParser) -> None:
    """``--no-verify`` or ``--verify MODE``, not both (argparse refuses the pair)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--no-verify",
        action="store_true",
        help="verify nothing: neither each extent nor the whole destination at the end",
    )
    g.add_argument(
        "--verify",
        choices=VERIFICATIONS,
        dest="verification",
        help="how a copy is verified: storage (each extent hashed from the destination's storage "
        "once, at the end; default) or receipt (each extent checked as it is written and again "
        "at the end by the digests of what its writes received, which the target drops at any "
        "change over them; from storage where it kept none)",
    )


def _interval_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--interval",
        type=_positive_float,
        default=1.0,
        metavar="SECONDS",
        help="between samples in watch (default 1)",
    )


# ---------------------------------------------------------------- formatting


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def human_rate(rate: float | None) -> str:
    return DASH if rate is None else f"{rate / 1e6:.1f} MB/s"


def human_eta(seconds: float | None) -> str:
    if seconds is None:
        return DASH
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def human_time(at: datetime) -> str:
    """UTC, to the second (the coordinator's datetimes may come without a zone: UTC)."""
    if at.tzinfo is not None:
        at = at.astimezone(UTC)
    return at.strftime("%Y-%m-%d %H:%M:%S")


def leg_done(leg: LegPublic) -> int:
    return leg.bytes if leg.state.value == "completed" else min(leg.done_bytes, leg.bytes)


def done_bytes(t: TransferPublic) -> int:
    """What the API says is done: all once completed, else its count or its legs' sum."""
    if t.state.value == "completed":
        return t.total_bytes
    return min(t.total_bytes, max(t.done_bytes, sum(leg_done(leg) for leg in t.legs)))


def percent(t: TransferPublic) -> str:
    if not t.total_bytes:
        return "100%" if t.state.value == "completed" else DASH
    return f"{100 * done_bytes(t) // t.total_bytes}%"


def legs_running(t: TransferPublic) -> int:
    """Legs whose copy runs (not those waiting to be resumed: :func:`legs_retrying`)."""
    return sum(1 for leg in t.legs if leg.state.value == "running" and not leg.last_error)


def legs_retrying(t: TransferPublic) -> int:
    """Running legs whose copy failed for a side it could not reach: the coordinator
    resumes them in a while (their error says why)."""
    return sum(1 for leg in t.legs if leg.state.value == "running" and leg.last_error)


def format_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart, no trailing blanks."""
    rows = [list(r) for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]
    return [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [list(headers), *rows]
    ]


def format_list(transfers: Sequence[TransferPublic]) -> list[str]:
    if not transfers:
        return ["no transfers"]
    rows = [
        [
            t.id,
            t.state.value,
            percent(t),
            human_rate(None if t.rate_bps is None else t.rate_bps / 8),
            human_eta(t.eta_seconds),
            verify_mode(t),
            human_time(t.created_at),
        ]
        for t in transfers
    ]
    headers = ["ID", "STATE", "PROGRESS", "RATE", "ETA", "VERIFY", "CREATED (UTC)"]
    return format_table(headers, rows)


def verify_mode(t: TransferPublic) -> str:
    """How the transfer is verified: ``storage``, ``receipt`` or ``off``."""
    return t.verification if t.verify else "off"


def format_legs(t: TransferPublic, agents: dict[str, str], links: dict[str, str]) -> list[str]:
    rows = [
        [
            str(leg.index),
            f"{agents.get(leg.source_agent, leg.source_agent)}:{leg.source_volume}",
            f"{agents.get(leg.dest_agent, leg.dest_agent)}:{leg.dest_volume}",
            human_bytes(leg.bytes),
            f"{100 * leg_done(leg) // leg.bytes}%" if leg.bytes else DASH,
            str(leg.streams),
            ",".join(links.get(p, p) for p in leg.paths) or DASH,
            leg.state.value,
            leg_summary.verified_words(leg.summary) or DASH,
        ]
        for leg in t.legs
    ]
    return format_table(
        ["LEG", "SOURCE", "DESTINATION", "BYTES", "DONE", "STREAMS", "PATHS", "STATE",
         "VERIFICATION"],
        rows,
    )  # fmt: skip


def format_events(events: Sequence[TransferEventPublic]) -> list[str]:
    rows = []
    for e in events:
        change = ""
        if e.to_state is not None:
            before = e.from_state.value if e.from_state is not None else "(new)"
            change = f"{before} -> {e.to_state.value}"
        rows.append([human_time(e.at), e.kind, change, e.detail])
    return format_table(["AT (UTC)", "KIND", "STATE", "DETAIL"], rows)


def format_status(
    t: TransferPublic,
    sets: dict[str, str],
    agents: dict[str, str],
    links: dict[str, str],
    events: Sequence[TransferEventPublic],
) -> list[str]:
    on = {True: "on", False: "off"}
    lines = [
        f"transfer {t.id}: {t.state.value}",
        f"  from      {sets.get(t.source, t.source)} -> {sets.get(t.destination, t.destination)}",
        f"  progress  {human_bytes(done_bytes(t))} / {human_bytes(t.total_bytes)} "
        f"({percent(t)}), legs running {legs_running(t)}/{len(t.legs)}",
        f"  streams   {t.streams_per_pair} per server pair; paths "
        + (", ".join(links.get(p, p) for p in t.paths) or DASH),
        f"  pacing    {t.pacing.policy.value} (margin {t.pacing.margin:g}); equalizer "
        f"{on[t.equalizer]}; verify {on[t.verify]}" + (f" ({t.verification})" if t.verify else ""),
        f"  created   {human_time(t.created_at)} UTC, updated {human_time(t.updated_at)} UTC",
    ]
    if t.last_error:
        lines.append(f"  error     {t.last_error}")
    lines += ["", *format_legs(t, agents, links)]
    for leg in t.legs:
        if leg.last_error:
            lines.append(f"  leg {leg.index}: {leg.last_error}")
        if lapses := leg_summary.lapse_warning(leg.summary):
            lines.append(f"  leg {leg.index}: {lapses}")
    if events:
        lines += ["", f"last {len(events)} events:", *format_events(events)]
    return lines


# ---------------------------------------------------------------- watch


class Sample:
    """One observation of a transfer's progress."""

    __slots__ = ("at", "done")

    def __init__(self, at: float, done: int) -> None:
        self.at, self.done = at, done


class RateMeter:
    """Bytes per second over the last :data:`RATE_WINDOW` seconds of samples."""

    def __init__(self, window: float = RATE_WINDOW) -> None:
        self.window = window
        self.samples: deque[Sample] = deque()

    def add(self, at: float, done: int) -> None:
        self.samples.append(Sample(at, done))
        while len(self.samples) > 2 and at - self.samples[1].at >= self.window:
            self.samples.popleft()

    @property
    def rate(self) -> float | None:
        if len(self.samples) < 2:
            return None
        first, last = self.samples[0], self.samples[-1]
        span = last.at - first.at
        return max(0.0, (last.done - first.done) / span) if span > 0 else None

    def eta(self, left: int) -> float | None:
        rate = self.rate
        if left <= 0:
            return 0.0
        return left / rate if rate else None


def progress_bar(done: int, total: int, width: int = BAR_WIDTH) -> str:
    filled = width if not total else min(width, width * done // total)
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def format_progress_line(t: TransferPublic, rate: float | None, eta: float | None) -> str:
    done = done_bytes(t)
    return (
        f"{progress_bar(done, t.total_bytes)} {percent(t):>4}  "
        f"{human_bytes(done)} / {human_bytes(t.total_bytes)}  {human_rate(rate)}  "
        f"ETA {human_eta(eta)}  legs {legs_running(t)}/{len(t.legs)} up  {t.state.value}"
        + (f", {retrying} retrying" if (retrying := legs_retrying(t)) else "")
    )


def progress_record(t: TransferPublic, meter: RateMeter) -> dict[str, Any]:
    """A ``watch --json`` line; the rate and ETA are this CLI's, from its samples."""
    done = done_bytes(t)
    return {
        "at": datetime.now(UTC).isoformat(),
        "id": t.id,
        "state": t.state.value,
        "done_bytes": done,
        "total_bytes": t.total_bytes,
        "bytes_per_second": meter.rate,
        "eta_seconds": meter.eta(t.total_bytes - done),
        "legs_running": legs_running(t),
        "legs": len(t.legs),
    }


class LineDisplay:
    """Redraws one line in place on a terminal; elsewhere writes a line when something
    changed or every :data:`PLAIN_INTERVAL` seconds."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.clock = clock
        self._drawn = False
        self._last_key: object = None
        self._last_at = 0.0

    def show(self, line: str, key: object) -> None:
        if self.tty:
            self.stream.write(f"\r\x1b[K{line}")
            self._drawn = True
        else:
            now = self.clock()
            if key == self._last_key and now - self._last_at < PLAIN_INTERVAL:
                return
            self._last_key, self._last_at = key, now
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


def watch(
    client: CoordinatorClient,
    transfer_id: str,
    out: TextIO,
    *,
    interval: float = 1.0,
    as_json: bool = False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Samples the transfer until it completes (0), fails or is cancelled (1)."""
    meter = RateMeter()
    display = LineDisplay(out, clock)
    try:
        while True:
            t = client.transfer(transfer_id)
            meter.add(clock(), done_bytes(t))
            if as_json:
                out.write(json.dumps(progress_record(t, meter)) + "\n")
                out.flush()
            else:
                eta = meter.eta(t.total_bytes - done_bytes(t))
                key = (t.state, done_bytes(t), legs_running(t))
                display.show(format_progress_line(t, meter.rate, eta), key)
            if t.state.value in EXIT_STATUS:
                display.finish()
                if t.last_error and not as_json:
                    out.write(f"error: {t.last_error}\n")
                return EXIT_STATUS[t.state.value]
            sleep(interval)
    finally:
        display.finish()


# ---------------------------------------------------------------- actions


class UsageError(ClientError):
    """Arguments the API's models refuse before anything is sent (exit status 2)."""


class Named(Protocol):
    """An agent, volume set or link: what the CLI finds by id or name."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=Named)


def find(items: Sequence[N], ref: str, kind: str) -> N:
    """The item whose id, else whose name, is ``ref``."""
    for item in items:
        if item.id == ref:
            return item
    for item in items:
        if item.name == ref:
            return item
    raise ClientError(f"no {kind} named {ref!r} (or with that id) on the coordinator")


def resolve(items: Sequence[Named], ref: str, kind: str) -> str:
    """The id of the item whose id, else whose name, is ``ref``."""
    return find(items, ref, kind).id


def dump(out: TextIO, data: object) -> None:
    """``data`` as indented JSON (``--json``)."""
    out.write(json.dumps(data, indent=2) + "\n")


def write_lines(out: TextIO, lines: Iterable[str]) -> None:
    """Each line, ended by a newline."""
    for line in lines:
        out.write(line + "\n")


def answer(
    out: TextIO,
    as_json: bool,
    data: BaseModel | Sequence[BaseModel],
    lines: Callable[[], Iterable[str]],
) -> int:
    """What an action prints: ``data`` (an item, or a list of them) as JSON with
    ``--json``, else the ``lines`` (made only then); its exit status, 0."""
    if not as_json:
        write_lines(out, lines())
    elif isinstance(data, Sequence):
        dump(out, [item.model_dump(mode="json") for item in data])
    else:
        dump(out, data.model_dump(mode="json"))
    return 0


def _names(client: CoordinatorClient) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Volume set, agent and link names by id, to show names rather than ids."""
    sets = client.volume_sets()
    agents = {m.agent_id: m.agent_name for s in sets for m in s.members}
    return {s.id: s.name for s in sets}, agents, {link.id: link.name for link in client.links()}


def _pair(text: str) -> tuple[str, str]:
    key, has_value, value = text.partition("=")
    if not has_value:
        raise UsageError(f"--label {text}: give KEY=VALUE")
    return key, value


def _transfer_body(
    args: argparse.Namespace, source: str, dest: str, paths: list[str]
) -> TransferCreate:
    # Lazy: the client and the API's models load when the coordinator is asked.
    from pydantic import ValidationError  # noqa: PLC0415

    from reservoir.server.app.models import TransferCreate  # noqa: PLC0415
    from reservoir.server.clients.client import field_path  # noqa: PLC0415

    body: dict[str, Any] = {"source": source, "destination": dest, "paths": paths}
    if args.streams is not None:
        body["streams_per_pair"] = args.streams
    pacing = {"policy": args.pacing, "margin": args.margin}
    body["pacing"] = {k: v for k, v in pacing.items() if v is not None}
    if args.equalizer is not None:
        body["equalizer"] = args.equalizer
    body["verify"] = not args.no_verify
    body["labels"] = dict(_pair(text) for text in args.labels)
    if args.verification is not None:
        body["verification"] = args.verification
    try:
        return TransferCreate.model_validate(body)
    except ValidationError as exc:
        lines = [
            f"{field_path(e['loc'])}: {e['msg'].removeprefix('Value error, ')}".lstrip(": ")
            for e in exc.errors(include_input=False)
        ]
        raise UsageError("\n".join(lines)) from None


def _start(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    sets = client.volume_sets()
    source = resolve(sets, args.source, "volume set")
    dest = resolve(sets, args.dest, "volume set")
    links = client.links() if args.paths else []
    paths = [resolve(links, ref, "link") for ref in args.paths]
    t = client.create_transfer(_transfer_body(args, source, dest, paths), args.idempotency_key)

    def started() -> list[str]:
        agents = {m.agent_id: m.agent_name for s in sets for m in s.members}
        link_names = {link.id: link.name for link in links}
        return [
            f"transfer {t.id} {t.state.value}: {len(t.legs)} legs, {human_bytes(t.total_bytes)}",
            *format_legs(t, agents, link_names),
        ]

    answer(out, args.json, t, started)
    out.flush()
    if args.watch:
        return watch(client, t.id, out, interval=args.interval, as_json=args.json)
    return 0


def _list(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    filters = {"state": args.state, "label": args.labels}
    if args.agent:
        filters["agent"] = [args.agent]
    transfers = client.transfers(**{k: v for k, v in filters.items() if v})
    return answer(out, args.json, transfers, lambda: format_list(transfers))


def transfer_id(client: CoordinatorClient, ref: str) -> str:
    """``ref`` when it is a whole id; else the one transfer whose id starts with it (as
    ``transfer list`` shows them, a user copies the first characters)."""
    if len(ref) >= ID_LENGTH or not set(ref.lower()) <= ID_CHARACTERS:
        return ref  # a whole id, or no part of one: the coordinator answers for it
    if len(ref) < MIN_PREFIX:
        raise ClientError(f"{ref!r}: give a transfer's id, or {MIN_PREFIX} characters of it")
    found = [t.id for t in client.transfers() if t.id.startswith(ref.lower())]
    if len(found) == 1:
        return found[0]
    if not found:
        raise ClientError(f"no transfer on the coordinator has an id starting with {ref!r}")
    raise ClientError(
        f"{len(found)} transfers have ids starting with {ref!r} "
        f"({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}): give more of the id"
    )


def _status(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    tid = transfer_id(client, args.id)
    t = client.transfer(tid)
    events = client.events(tid)[-args.events :] if args.events > 0 else []
    if args.json:
        dump(
            out,
            {
                "transfer": t.model_dump(mode="json"),
                "events": [e.model_dump(mode="json") for e in events],
            },
        )
    else:
        write_lines(out, format_status(t, *_names(client), events))
    return 0


def _watch(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    tid = transfer_id(client, args.id)
    return watch(client, tid, out, interval=args.interval, as_json=args.json)


def _act(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    t = client.act(transfer_id(client, args.id), args.action)
    return answer(out, args.json, t, lambda: [f"transfer {t.id}: {t.state.value}"])


ACTIONS: dict[str, Callable[[CoordinatorClient, argparse.Namespace, TextIO], int]] = {
    "start": _start,
    "list": _list,
    "status": _status,
    "watch": _watch,
    "pause": _act,
    "resume": _act,
    "cancel": _act,
}


def connection(args: argparse.Namespace) -> tuple[str, str | None]:
    """The coordinator's URL and the token: options, else the environment, else defaults."""
    server = getattr(args, "server", None) or os.environ.get(ENV_SERVER) or DEFAULT_SERVER
    token = getattr(args, "token", None) or os.environ.get(ENV_TOKEN) or None
    return server, token


def main(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    return run_action(PROG, ACTIONS, args, out, err)


Action = Callable[["CoordinatorClient", argparse.Namespace, TextIO], int]


def run_action(
    prog_name: str,
    actions: dict[str, Action],
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Runs ``args.action`` of a coordinator command (``reservoir transfer``, ``link``)
    with a client: 0 or the action's status; 2 for a usage error, 1 for the API's
    refusal or an unreachable coordinator, each said on ``err`` in the API's words."""
    # Lazy: httpx and the client (0.17 s) load for this command only.
    from reservoir.server.clients.client import ApiError, CoordinatorClient  # noqa: PLC0415

    out = out or sys.stdout
    err = err or sys.stderr
    args.json = getattr(args, "json", False)
    prog = f"{prog_name} {args.action}"
    server, token = connection(args)
    try:
        with CoordinatorClient(server, token) as client:
            return actions[args.action](client, args, out)
    except UsageError as exc:
        write_lines(err, [f"{prog}: invalid arguments", *str(exc).splitlines()])
        return 2
    except ApiError as exc:
        write_lines(err, [f"{prog}: {exc.lines()[0]}", *exc.lines()[1:]])
        return 1
    except ClientError as exc:
        err.write(f"{prog}: {exc}\n")
        return 1
