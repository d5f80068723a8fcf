"""Events during a run, ``[[event]]``: times in seconds since the transfer started::

    [[event]]
    at_s = 20
    action = "link-down"   # or "link-up"
    link = "l1"            # a link of the lab

Every run of the campaign gets the same events. They need a lab topology (the runner
cannot cut a registered link, and loopback has none), a link may only go down when up
and up when down, and each must fall within every run: before ``duration_s`` for
iperf3, before the ideal time of ``size`` at the bottleneck for reservoir.

Loss cannot change during a run: the delay line takes its loss rate when it starts
(``--loss``, lab/network.py ``dline_args``) and has no control to change it later. A
``loss`` action is refused with that reason; loss is a matrix dimension instead
(``loss = [0, 1e-4]``), set on the path links when the lab is built.
"""

from __future__ import annotations

from typing import Any, cast

from reservoir.campaigns import _check as check
from reservoir.campaigns._matrix import Matrix
from reservoir.campaigns._scenario import Action, Event
from reservoir.campaigns._topology import Topology

KEYS = ("at_s", "action", "link", "value")
RUN_ACTIONS = ("link-down", "link-up")
LOSS_REFUSED = (
    "loss cannot change during a run: the delay line takes its loss rate when it starts"
    " (lab/network.py dline_args); make it a matrix dimension instead, e.g."
    " loss = [0, 1e-4], applied to the path links when the lab is built"
)


def parse_events(data: Any, errors: list[str]) -> tuple[Event, ...] | None:
    if not isinstance(data, list) or not all(isinstance(t, dict) for t in data):
        errors.append("event: must be an array of tables ([[event]])")
        return None
    n_before = len(errors)
    events = [_event(f"event[{i}]", t, errors) for i, t in enumerate(data)]
    if len(errors) > n_before:
        return None
    return tuple(e for e in events if e is not None)


def _event(where: str, t: dict[str, Any], errors: list[str]) -> Event | None:
    check.unknown_keys(where, t, KEYS, errors)
    at_s = check.number(f"{where}.at_s", t.get("at_s"), 0, 86_400, errors)
    action = t.get("action")
    if action == "loss":
        errors.append(f"{where}.action: {LOSS_REFUSED}")
    else:
        action = check.choice(f"{where}.action", action, RUN_ACTIONS, errors)
    if "value" in t and action in RUN_ACTIONS:
        errors.append(f"{where}.value: {action} takes no value")
    link = check.text(f"{where}.link", t.get("link"), errors)
    if at_s is None or link is None or action not in RUN_ACTIONS:
        return None
    return Event(at_s, cast("Action", action), link)


def check_events(
    events: tuple[Event, ...], topology: Topology, matrix: Matrix, errors: list[str]
) -> None:
    """The events against the topology (their links) and the matrix (the runs' ends)."""
    if events and topology.kind != "lab":
        why = (
            "a registered link cannot be cut from here"
            if topology.kind == "real"
            else ("loopback has no links")
        )
        errors.append(f"event: events need a lab topology ({why})")
        return
    order = sorted(range(len(events)), key=lambda i: events[i].at_s)
    down: dict[str, int] = {}
    for i in order:
        e, where = events[i], f"event[{i}]"
        if e.link not in topology.links:
            errors.append(
                f"{where}.link: {e.link!r} is not a link of the lab ({', '.join(topology.links)})"
            )
        elif e.action == "link-down" and e.link in down:
            errors.append(f"{where}: {e.link} is already down (event[{down[e.link]}])")
        elif e.action == "link-up" and e.link not in down:
            errors.append(f"{where}: {e.link} is not down at {e.at_s:g} s")
        elif e.action == "link-down":
            down[e.link] = i
        else:
            del down[e.link]
        _check_within(where, e, topology, matrix, errors)


def _check_within(
    where: str, e: Event, topology: Topology, matrix: Matrix, errors: list[str]
) -> None:
    """Before the end of every run: the shortest iperf3 run, and the shortest reservoir
    copy at the bottleneck (the scenarios left after exclude)."""
    scenarios = matrix.expand()
    durations = [s.duration_s for s in scenarios if s.duration_s is not None]
    if durations and e.at_s >= min(durations):
        errors.append(
            f"{where}.at_s: {e.at_s:g} s is not within every run: iperf3 runs last"
            f" {min(durations):g} s (matrix.duration_s)"
        )
    sizes = [s.size_bytes for s in scenarios if s.size_bytes is not None]
    if sizes and topology.bottleneck_mbit:
        seconds = min(sizes) * 8 / (topology.bottleneck_mbit * 1e6)
        if e.at_s >= seconds:
            errors.append(
                f"{where}.at_s: {e.at_s:g} s is not within every run: a reservoir copy of"
                f" {check.format_size(min(sizes))} (matrix.size) takes {seconds:.1f} s at the"
                f" bottleneck's {topology.bottleneck_mbit:g} Mbit/s"
            )
