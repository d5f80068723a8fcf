"""One iperf3 run on a registered network: through the agents' control API, by way of
the coordinator (``/agents/{id}/iperf/...``).

As in the lab (``_iperf3_run.py``) the streams are dealt to the paths as the coordinator
deals a copy's (in proportion to capacity): per path, a one-shot
server on the destination agent bound to its address on the link, then a client run on
the source agent bound to its own, with that path's share of the streams, the
scenario's congestion control and duration. ``per-nic`` pacing has the source agent
pace the path's NIC for the run (its NIC pacer, as copies use); ``per-socket`` gives
every stream ``--fq-rate``. The agents report each stream's bits/s per second and its
retransmits over the run (no cwnd or RTT per interval); CPU is iperf3's own figure for
the client and the server (``cpu_utilization_percent`` x the run's seconds).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack, suppress
from typing import Any

from reservoir.campaigns._scenario import Scenario
from reservoir.campaigns.results import Run, Sample, Stream
from reservoir.campaigns.run.iperf3_run import Iperf3Error, Leg, legs
from reservoir.campaigns.run.remote import Remote
from reservoir.campaigns.run.site import SiteError
from reservoir.campaigns.run.telemetry import intervals, scenario_record
from reservoir.campaigns.run.timeline import PAYLOAD, nic_rates

__all__ = ["run_iperf3_remote"]

SERVER_SLACK_S = 60  # a server waits this long beyond the run's duration, then is killed
POLL_S = 0.5
Json = dict[str, Any]
Progress = Callable[[float, float], None]


def run_body(leg: Leg, port: int, scenario: Scenario, nic: str, nic_rate: float | None) -> Json:
    """``POST /agents/{source}/iperf/runs`` for one path."""
    assert scenario.duration_s is not None
    body: Json = {
        "host": leg.dst,
        "port": port,
        "streams": leg.streams,
        "duration": max(1, round(scenario.duration_s)),
        "bind": leg.src,
        "congestion": scenario.cc,
    }
    if scenario.pacing == "per-socket" and nic_rate:
        body["fq_rate_bps"] = int(nic_rate * PAYLOAD / leg.streams)
    if scenario.pacing == "per-nic" and nic_rate:
        body["nic"], body["nic_pacing_bps"] = nic, int(nic_rate)
    return body


def streams_of(result: Json, offset: float, path: str | None, prefix: str) -> list[Stream]:
    """One :class:`Stream` per socket of an agent's iperf3 result: a sample at the end
    of every one-second interval after ``offset``; the stream's retransmits over the
    run on its last sample."""
    out = []
    retrans = result.get("stream_retransmits") or []
    for i, rates in enumerate(result.get("stream_bits_per_second") or []):
        samples = [Sample(offset + k + 1.0, float(bps)) for k, bps in enumerate(rates)]
        if samples and i < len(retrans) and retrans[i] is not None:
            samples[-1].retransmits = int(retrans[i])
        out.append(Stream(f"{prefix}{i}", path, samples))
    return out


def _start(remote: Remote, ls: list[Leg], scenario: Scenario, stack: ExitStack) -> list[str]:
    """Servers on the destination, then one client run per path; the runs' ids."""
    assert scenario.duration_s is not None
    src, dst = remote.source["id"], remote.destination["id"]
    rates = nic_rates(remote, scenario)
    nics = {p.name: p.nic for p in remote.paths}
    ports = []
    for leg in ls:
        body = {"address": leg.dst, "timeout": scenario.duration_s + SERVER_SLACK_S}
        server = remote.call("POST", f"/agents/{dst}/iperf/servers", json=body)
        stack.callback(_stop_server, remote, dst, str(server["id"]))
        ports.append(int(server["port"]))
    return [
        str(
            remote.call(
                "POST",
                f"/agents/{src}/iperf/runs",
                json=run_body(leg, port, scenario, nics[leg.path or ""], rates.get(leg.path or "")),
            )["id"]
        )
        for leg, port in zip(ls, ports, strict=True)
    ]


def _stop_server(remote: Remote, agent: str, server: str) -> None:
    with suppress(SiteError):  # it served its test and exited: nothing to stop
        remote.call("DELETE", f"/agents/{agent}/iperf/servers/{server}")


def _poll(
    remote: Remote, runs: list[str], scenario: Scenario, started: float, tick: Progress
) -> list[Json]:
    assert scenario.duration_s is not None
    src = remote.source["id"]
    deadline = time.monotonic() + scenario.duration_s + SERVER_SLACK_S
    while True:
        found = [remote.call("GET", f"/agents/{src}/iperf/runs/{r}") for r in runs]
        failed = [f for f in found if f["state"] == "failed"]
        if failed:
            raise Iperf3Error(f"iperf3 on {remote.source['name']}: {failed[0]['error']}")
        if all(f["state"] == "completed" for f in found):
            return found
        if time.monotonic() > deadline:
            raise Iperf3Error(f"iperf3 runs still running {SERVER_SLACK_S} s after -t")
        tick(min(1.0, (time.time() - started) / scenario.duration_s), 0.0)
        time.sleep(POLL_S)


def run_iperf3_remote(remote: Remote, scenario: Scenario, repetition: int, tick: Progress) -> Run:
    """One repetition of an iperf3 scenario on the registered paths; raises on failure
    (the runner records it)."""
    ls = legs(remote, scenario.streams)
    with ExitStack() as stack:
        started = time.time()
        runs = _start(remote, ls, scenario, stack)
        offset = time.time() - started  # the clients start within this of each other
        done = _poll(remote, runs, scenario, started, tick)
        seconds = time.time() - started
    run = Run(scenario_record(scenario), repetition, started, seconds, 0, 0.0, 0.0)
    duration = 0.0
    for i, (leg, job) in enumerate(zip(ls, done, strict=True)):
        result: Json = job["result"]
        run.streams += streams_of(result, offset, leg.path, f"{leg.path}.{i}.")
        run.bytes += int(result["bytes_received"])
        secs = float(result["seconds"])
        duration = max(duration, secs)
        cpu = result.get("cpu_utilization_percent") or {}
        run.cpu_seconds += (cpu.get("host_total", 0.0) + cpu.get("remote_total", 0.0)) / 100 * secs
    run.goodput_bps = run.bytes * 8 / duration if duration > 0 else 0.0
    run.intervals = intervals(run.streams)
    return run
