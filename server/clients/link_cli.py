"""``reservoir link list|show|probe``: the coordinator's links, their probes and
recommendations (``server/domain/probe.py``).

Global options as ``reservoir transfer``: ``--server URL`` (default
``$RESERVOIR_SERVER_URL``, else ``http://127.0.0.1:8470``), ``--token TOKEN`` (default
``$RESERVOIR_TOKEN``) and ``--json``. A link is named by its id or its name.

``probe ID`` starts a probe and returns; ``--wait`` polls until it ends and shows the
link. Exit status: 0 on success, 1 when the coordinator refuses or cannot be reached
or the awaited probe failed, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from reservoir.server.clients.transfer_cli import (
    DASH,
    ENV_SERVER,
    ENV_TOKEN,
    UsageError,
    answer,
    format_table,
    human_time,
    resolve,
    run_action,
)

if TYPE_CHECKING:  # imported on use: other ``reservoir`` commands must not pay for httpx
    from reservoir.server.app.models import LinkPublic, ProbeCreate
    from reservoir.server.clients.client import CoordinatorClient

__all__ = ["format_link", "format_list", "main", "register"]

Sub = Any  # argparse's _SubParsersAction is private
PROG = "reservoir link"
WAIT_INTERVAL = 2.0


def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--server", metavar="URL", default=argparse.SUPPRESS, help=f"(${ENV_SERVER})")
    p.add_argument("--token", default=argparse.SUPPRESS, help=f"a user's token (${ENV_TOKEN})")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine output")
    return p


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list like 1,4,8") from None


def _float_list(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list like 0.9,0.95") from None


def register(sub: Sub) -> Sub:
    common = _common()
    p = sub.add_parser(
        "link",
        parents=[common],
        help="list the coordinator's links, probe them with iperf3, show recommendations",
        description="Links on the coordinator's API.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("list", parents=[common], help="the links, one a line")
    show = actions.add_parser("show", parents=[common], help="a link, its probe and measurements")
    show.add_argument("id", metavar="ID")
    probe = actions.add_parser("probe", parents=[common], help="measure a link with iperf3")
    probe.add_argument("id", metavar="ID")
    probe.add_argument("--wait", action="store_true", help="until the probe ends")
    probe.add_argument("--streams", type=_int_list, metavar="N,N", help="default 1,4,8,16")
    probe.add_argument(
        "--pacing", type=_float_list, metavar="F,F", help="fractions of capacity (default 0.95)"
    )
    probe.add_argument("--duration", type=int, metavar="S", help="seconds per run (default 5)")
    probe.add_argument(
        "--direction", choices=["a-to-b", "b-to-a"], help="one direction (default both)"
    )
    p.set_defaults(func=main)
    return actions


# ---------------------------------------------------------------- formatting


def _mbit(bps: float | None) -> str:
    return "unpaced" if bps is None else f"{bps / 1e6:.1f} Mbit/s"


def _recommended(link: LinkPublic) -> tuple[str, str]:
    rec = link.recommendation
    if rec is None:
        return DASH, DASH
    pacing = ", ".join(
        f"{side}: {_mbit(rate)}" for side, rate in sorted(rec.nic_pacing_bps.items())
    )
    return str(rec.streams), pacing


def format_list(links: Sequence[LinkPublic]) -> list[str]:
    if not links:
        return ["no links"]
    rows = []
    for link in links:
        streams, pacing = _recommended(link)
        probe = DASH if link.probe is None else link.probe.state
        rows.append(
            [
                link.name,
                link.id,
                _mbit(link.capacity_bps),
                f"{link.rtt_ms:g} ms",
                probe,
                streams,
                pacing,
            ]
        )
    return format_table(["NAME", "ID", "CAPACITY", "RTT", "PROBE", "STREAMS", "PACING"], rows)


def format_link(link: LinkPublic) -> list[str]:
    lines = [
        f"link {link.name} ({link.id})",
        f"  ends      {link.agent_a}:{link.nic_a} <-> {link.agent_b}:{link.nic_b}",
        f"  capacity  {_mbit(link.capacity_bps)}, rtt {link.rtt_ms:g} ms, {link.source.value}",
    ]
    if link.probe is not None:
        p = link.probe
        when = human_time(p.started_at) + " UTC" if p.started_at else DASH
        lines.append(f"  probe     {p.state}, started {when}")
        if p.error:
            lines.append(f"  error     {p.error}")
    rec = link.recommendation
    if rec is None:
        lines.append("  recommendation: none (no completed probe)")
        return lines
    streams, pacing = _recommended(link)
    lines += [
        f"  recommend {streams} streams; NIC pacing {pacing}",
        f"  measured  {human_time(rec.measured_at)} UTC",
        "",
    ]
    rows = [
        [
            r.direction,
            str(r.streams),
            _mbit(r.pacing_bps),
            _mbit(r.bits_per_second),
            DASH if r.retransmits is None else str(r.retransmits),
            DASH if r.cpu_percent is None else f"{r.cpu_percent:.0f}%",
        ]
        for r in rec.measurements
    ]
    return lines + format_table(
        ["DIRECTION", "STREAMS", "NIC PACING", "GOODPUT", "RETRANS", "CPU"], rows
    )


# ---------------------------------------------------------------- actions


def _list(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    links = client.links()
    return answer(out, args.json, links, lambda: format_list(links))


def _show(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    link = client.link(resolve(client.links(), args.id, "link"))
    return answer(out, args.json, link, lambda: format_link(link))


def _probe_body(args: argparse.Namespace) -> ProbeCreate:
    # Lazy: the client and the API's models load when the coordinator is asked.
    from pydantic import ValidationError  # noqa: PLC0415

    from reservoir.server.app.models import ProbeCreate  # noqa: PLC0415
    from reservoir.server.clients.client import field_path  # noqa: PLC0415

    body: dict[str, Any] = {}
    for key in ("streams", "pacing", "duration"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    if args.direction is not None:
        body["directions"] = [args.direction]
    try:
        return ProbeCreate.model_validate(body)
    except ValidationError as exc:
        raise UsageError(
            "\n".join(
                f"{field_path(e['loc'])}: {e['msg'].removeprefix('Value error, ')}".lstrip(": ")
                for e in exc.errors(include_input=False)
            )
        ) from None


def _probe(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    body = _probe_body(args)
    link_id = resolve(client.links(), args.id, "link")
    link = client.probe_link(link_id, body)
    if not args.wait:
        running = f"link {link.name}: probe running; `{PROG} show {link.name}` for its result"
        return answer(out, args.json, link, lambda: [running])
    while link.probe is not None and link.probe.state == "running":
        time.sleep(WAIT_INTERVAL)
        link = client.link(link_id)
    answer(out, args.json, link, lambda: format_link(link))
    return 0 if link.probe is not None and link.probe.state == "completed" else 1


ACTIONS: dict[str, Callable[[CoordinatorClient, argparse.Namespace, TextIO], int]] = {
    "list": _list,
    "show": _show,
    "probe": _probe,
}


def main(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    return run_action(PROG, ACTIONS, args, out, err)
