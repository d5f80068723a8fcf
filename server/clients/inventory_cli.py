"""The coordinator's inventory from the command line: agents, volume sets and links.

- ``reservoir agent register NAME --url URL [--nic-speed RATE]``: the agent is asked
  for its NICs and volumes (``discover``) and registered with them; ``list``, ``show
  AGENT``, ``update AGENT [--url URL] [--nic NIC=RATE]...``, ``remove AGENT``.
- ``reservoir volume-set create NAME --member AGENT:VOLUME... [--stripe-unit SIZE]``,
  ``list``, ``show SET``, ``remove SET``.
- ``reservoir link create NAME --a AGENT:NIC --b AGENT:NIC --capacity RATE --rtt MS``
  and ``remove LINK`` (beside ``link list|show|probe``, ``link_cli.py``).

Global options as ``reservoir transfer``: ``--server``, ``--token``, ``--json``. Items
are named by id or name; rates take units (``10G``, ``25Gbit``), sizes too (``1MiB``).
Exit status: 0, 1 when the coordinator refuses or cannot be reached, 2 for usage.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from reservoir.common.sizes import rate_arg, size_arg
from reservoir.server.clients.transfer_cli import (
    DASH,
    UsageError,
    answer,
    common_options,
    find,
    format_table,
    human_bytes,
    human_time,
    run_action,
)

if TYPE_CHECKING:  # imported on use: other commands must not pay for httpx
    from reservoir.server.app.models import AgentPublic, LinkPublic, VolumeSetPublic
    from reservoir.server.clients.client import CoordinatorClient

__all__ = ["extend_agent", "extend_link", "register"]

Sub = Any  # argparse's _SubParsersAction is private
Action = Callable[["CoordinatorClient", argparse.Namespace, TextIO], int]


def _pair(text: str, sep: str, what: str) -> tuple[str, str]:
    left, found, right = text.partition(sep)
    if not found or not left or not right:
        raise UsageError(f"{text!r} is not {what}")
    return left, right


def _runner(prog: str, actions: dict[str, Action]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        return run_action(prog, actions, args)

    return run


# ---------------------------------------------------------------- agents


def format_agent(a: AgentPublic) -> list[str]:
    heard = human_time(a.last_heartbeat_at) if a.last_heartbeat_at else "never"
    lines = [
        f"agent {a.name} ({a.id}): {a.status}, last heartbeat {heard}, "
        f"token generation {a.token_generation}",
        f"control URL {a.control_url}",
        "labels " + (", ".join(f"{k}={v}" for k, v in a.labels.items()) or DASH),
        "",
        *format_table(
            ["NIC", "ADDRESS", "SPEED"],
            [[n.name, n.address, f"{n.speed_bps / 1e9:g} Gbit/s"] for n in a.nics],
        ),
        "",
    ]
    rows = [
        [v.name, v.path or f"{v.iqn} lun {v.lun}", human_bytes(v.size_bytes), v.device_id or DASH]
        for v in a.volumes
    ]
    return lines + (format_table(["VOLUME", "WHERE", "SIZE", "DEVICE"], rows) or ["no volumes"])


def _agent_register(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    body: dict[str, Any] = {"name": args.name, "control_url": args.url, "discover": True}
    body["labels"] = dict(_pair(text, "=", "KEY=VALUE") for text in args.labels)
    if args.nic_speed is not None:
        body["nic_speed_bps"] = args.nic_speed
    agent = client.register_agent(body)
    return answer(out, args.json, agent, lambda: format_agent(agent))


def _agent_list(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    agents = client.agents(label=args.labels) if args.labels else client.agents()
    return answer(out, args.json, agents, lambda: _agent_table(agents))


def _agent_table(agents: list[AgentPublic]) -> list[str]:
    rows = [
        [a.name, a.id, a.status, str(len(a.nics)), str(len(a.volumes)),
         human_time(a.last_heartbeat_at) if a.last_heartbeat_at else DASH]
        for a in agents
    ]  # fmt: skip
    headers = ["NAME", "ID", "STATUS", "NICS", "VOLUMES", "LAST HEARTBEAT"]
    return format_table(headers, rows) if rows else ["no agents"]


def _agent_show(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    agent = find(client.agents(), args.agent, "agent")
    return answer(out, args.json, agent, lambda: format_agent(agent))


def _agent_update(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    agent = find(client.agents(), args.agent, "agent")
    body: dict[str, Any] = {}
    if args.url:
        body["control_url"] = args.url
    nics = []
    for text in args.nics:
        name, rate = _pair(text, "=", "NIC=RATE (e.g. eth1=25G)")
        try:
            nics.append({"name": name, "speed_bps": rate_arg(rate)})
        except argparse.ArgumentTypeError as exc:
            raise UsageError(str(exc)) from None
    if nics:
        body["nics"] = nics
    changes: dict[str, str | None] = {k: None for k in args.unlabels}
    changes.update(_pair(text, "=", "KEY=VALUE") for text in args.labels)
    if changes:
        body["labels"] = changes
    if args.rotate_tokens:
        body["rotate_tokens"] = True
    if not body:
        raise UsageError("nothing to change: give --url, --nic, --label or --rotate-tokens")
    updated = client.update_agent(agent.id, body)
    return answer(out, args.json, updated, lambda: format_agent(updated))


def _agent_remove(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    agent = find(client.agents(), args.agent, "agent")
    client.delete("agents", agent.id)
    out.write(f"agent {agent.name} removed\n")
    return 0


AGENT_ACTIONS: dict[str, Action] = {
    "register": _agent_register,
    "list": _agent_list,
    "show": _agent_show,
    "update": _agent_update,
    "remove": _agent_remove,
}


def _labels(p: argparse.ArgumentParser, metavar: str, text: str) -> None:
    p.add_argument(
        "--label", dest="labels", action="append", default=[], metavar=metavar, help=text
    )


def extend_agent(actions: Sub) -> None:
    """Adds the inventory actions to ``reservoir agent`` (beside serve and tune)."""
    common = common_options()
    run = _runner("reservoir agent", AGENT_ACTIONS)
    register_p = actions.add_parser(
        "register", parents=[common], help="register an agent on the coordinator from what "
        "it reports (its NICs and volumes)",
    )  # fmt: skip
    register_p.add_argument("name", metavar="NAME", help="its name (its tokens derive from it)")
    register_p.add_argument("--url", required=True, help="its control API, http(s)://HOST:PORT")
    register_p.add_argument(
        "--nic-speed", type=rate_arg, metavar="RATE",
        help="line rate of NICs whose kernel reports none (e.g. 10G)",
    )  # fmt: skip
    _labels(register_p, "KEY=VALUE", "a label of the agent (repeatable)")
    listing = actions.add_parser("list", parents=[common], help="the registered agents")
    _labels(listing, "KEY[=VALUE]", "agents with this label (repeatable: all of them)")
    show = actions.add_parser("show", parents=[common], help="an agent, its NICs and volumes")
    show.add_argument("agent", metavar="AGENT")
    update = actions.add_parser("update", parents=[common], help="change an agent")
    update.add_argument("agent", metavar="AGENT")
    update.add_argument("--url", help="its new control URL")
    update.add_argument(
        "--nic", dest="nics", action="append", default=[], metavar="NIC=RATE",
        help="a NIC's line rate (repeatable)",
    )  # fmt: skip
    _labels(update, "KEY=VALUE", "set a label (repeatable)")
    update.add_argument(
        "--unlabel", dest="unlabels", action="append", default=[], metavar="KEY",
        help="remove a label (repeatable)",
    )  # fmt: skip
    update.add_argument(
        "--rotate-tokens", action="store_true",
        help="the agent's next token generation (give the agent its new digest first: "
        "reservoir server agent-credentials NAME --generation N)",
    )  # fmt: skip
    remove = actions.add_parser("remove", parents=[common], help="remove an unused agent")
    remove.add_argument("agent", metavar="AGENT")
    for name in AGENT_ACTIONS:
        actions.choices[name].set_defaults(func=run, action=name)


# ---------------------------------------------------------------- volume sets


def format_set(s: VolumeSetPublic) -> list[str]:
    head = f"volume set {s.name} ({s.id}): stripe unit {human_bytes(s.stripe_unit)}"
    rows = [[m.agent_name, m.volume, human_bytes(m.size_bytes)] for m in s.members]
    return [head, "", *format_table(["AGENT", "VOLUME", "SIZE"], rows)]


def _set_create(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    agents = client.agents()
    members = []
    for text in args.members:
        ref, volume = _pair(text, ":", "AGENT:VOLUME")
        members.append({"agent_id": find(agents, ref, "agent").id, "volume": volume})
    body: dict[str, Any] = {"name": args.name, "members": members}
    if args.stripe_unit is not None:
        body["stripe_unit"] = args.stripe_unit
    made = client.create_volume_set(body)
    return answer(out, args.json, made, lambda: format_set(made))


def _set_list(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    sets = client.volume_sets()
    return answer(out, args.json, sets, lambda: _set_table(sets))


def _set_table(sets: list[VolumeSetPublic]) -> list[str]:
    rows = [
        [s.name, s.id, str(len(s.members)), human_bytes(sum(m.size_bytes for m in s.members))]
        for s in sets
    ]
    return format_table(["NAME", "ID", "MEMBERS", "SIZE"], rows) if rows else ["no volume sets"]


def _set_show(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    found = find(client.volume_sets(), args.set, "volume set")
    return answer(out, args.json, found, lambda: format_set(found))


def _set_remove(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    found = find(client.volume_sets(), args.set, "volume set")
    client.delete("volume-sets", found.id)
    out.write(f"volume set {found.name} removed\n")
    return 0


SET_ACTIONS: dict[str, Action] = {
    "create": _set_create,
    "list": _set_list,
    "show": _set_show,
    "remove": _set_remove,
}


def register(sub: Sub) -> None:
    """``reservoir volume-set``."""
    common = common_options()
    p = sub.add_parser(
        "volume-set", parents=[common], help="create, list, show and remove volume sets",
        description="Volume sets on the coordinator's API: agents' volumes striped as one.",
    )  # fmt: skip
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", parents=[common], help="a volume set of members")
    create.add_argument("name", metavar="NAME")
    create.add_argument(
        "--member", dest="members", action="append", required=True, metavar="AGENT:VOLUME",
        help="an agent's volume, in stripe order (repeatable)",
    )  # fmt: skip
    create.add_argument(
        "--stripe-unit", type=size_arg, metavar="SIZE", help="e.g. 1MiB (the API's default)"
    )
    actions.add_parser("list", parents=[common], help="the volume sets")
    for name, text in (("show", "a volume set and its members"), ("remove", "remove one")):
        one = actions.add_parser(name, parents=[common], help=text)
        one.add_argument("set", metavar="SET")
    p.set_defaults(func=_runner("reservoir volume-set", SET_ACTIONS))


# ---------------------------------------------------------------- links


def _link_create(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    agents = client.agents()
    ends = {}
    for side, text in (("a", args.a), ("b", args.b)):
        ref, nic = _pair(text, ":", "AGENT:NIC")
        ends[side] = (find(agents, ref, "agent").id, nic)
    body = {
        "name": args.name,
        "agent_a": ends["a"][0],
        "nic_a": ends["a"][1],
        "agent_b": ends["b"][0],
        "nic_b": ends["b"][1],
        "capacity_bps": args.capacity,
        "rtt_ms": args.rtt,
    }
    link: LinkPublic = client.create_link(body)
    return answer(out, args.json, link, lambda: [f"link {link.name} ({link.id}) created"])


def _link_remove(client: CoordinatorClient, args: argparse.Namespace, out: TextIO) -> int:
    link = find(client.links(), args.link, "link")
    client.delete("links", link.id)
    out.write(f"link {link.name} removed\n")
    return 0


LINK_ACTIONS: dict[str, Action] = {"create": _link_create, "remove": _link_remove}


def extend_link(actions: Sub) -> None:
    """Adds ``create`` and ``remove`` to ``reservoir link``."""
    common = common_options()
    create = actions.add_parser("create", parents=[common], help="a link between two NICs")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--a", required=True, metavar="AGENT:NIC", help="one end")
    create.add_argument("--b", required=True, metavar="AGENT:NIC", help="the other end")
    create.add_argument(
        "--capacity", type=rate_arg, required=True, metavar="RATE", help="its bottleneck, e.g. 1G"
    )
    create.add_argument("--rtt", type=float, required=True, metavar="MS", help="round trip, ms")
    remove = actions.add_parser("remove", parents=[common], help="remove an unused link")
    remove.add_argument("link", metavar="LINK")
    run = _runner("reservoir link", LINK_ACTIONS)
    for name in LINK_ACTIONS:
        actions.choices[name].set_defaults(func=run, action=name)
