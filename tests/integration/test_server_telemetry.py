"""Telemetry end to end on loopback: a real coordinator and two real agents (as in
test_server_scheduler.py); while a transfer of 2 legs (2 copies of 2 streams) runs,
``/streams`` serves samples of every stream, ``/metrics`` has the per-transfer and
per-stream series, and ``/live`` delivers samples and ends once it completes."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .test_server_scheduler import USER, Site, agent, completed, coordinator, wait

pytestmark = pytest.mark.integration

Json = dict[str, Any]


@pytest.fixture
def site(tmp_path: Path, database_url: str) -> Site:
    return Site(tmp_path, database_url)


def read_live(url: str, tid: str, out: list[tuple[str, Any]], done: threading.Event) -> None:
    headers = {"Authorization": f"Bearer {USER}"}
    try:
        with (
            httpx.Client(base_url=url, headers=headers, timeout=60) as c,
            c.stream("GET", f"/transfers/{tid}/live") as r,
        ):
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            name = None
            for line in r.iter_lines():
                if line.startswith("event: "):
                    name = line[len("event: ") :]
                elif line.startswith("data: ") and name is not None:
                    out.append((name, json.loads(line[len("data: ") :])))
    finally:
        done.set()


def listed(r: httpx.Response) -> list[Json]:
    assert r.status_code == 200, r.text
    data: list[Json] = r.json()
    return data


def scrape(c: httpx.Client) -> dict[str, list[Any]]:
    r = c.get(str(c.base_url).replace("/api/v1", "") + "metrics")
    assert r.status_code == 200, r.text
    return {f.name: f.samples for f in text_string_to_metric_families(r.text)}


def test_streams_live_and_metrics_of_a_running_transfer(site: Site) -> None:
    with agent(site.a), agent(site.b), coordinator(site) as c:
        base = str(c.base_url).rstrip("/")
        assert httpx.get(base.replace("/api/v1", "/metrics")).status_code == 401
        tid = site.register(c)["id"]
        feed: list[tuple[str, Any]] = []
        ended = threading.Event()
        reader = threading.Thread(target=read_live, args=(base, tid, feed, ended))
        reader.start()
        running = wait(c, tid, lambda t: all(leg["copy_id"] for leg in t["legs"]))
        copies = {leg["copy_id"] for leg in running["legs"]}
        want = {(copy, str(s)) for copy in copies for s in range(2)}
        deadline = time.monotonic() + 30
        seen: set[tuple[str, str]] = set()
        samples: list[Json] = []
        got: dict[str, list[Any]] = {}
        series: set[tuple[str, str]] = set()
        while (seen != want or series != want) and time.monotonic() < deadline:
            samples = listed(c.get(f"/transfers/{tid}/streams", params={"limit": 500}))
            seen = {(s["copy_id"], s["stream"]) for s in samples}
            got = scrape(c)
            series = {
                (s.labels["copy"], s.labels["stream"])
                for s in got.get("reservoir_stream_throughput_bytes_per_second", [])
                if s.labels["transfer"] == tid
            }
            time.sleep(0.2)
        assert seen == want, samples
        assert series == want
        assert {s.labels["transfer"] for s in got["reservoir_transfer_copied_bytes"]} == {tid}
        assert {s.labels["transfer"] for s in got["reservoir_stream_cwnd_bytes"]} == {tid}
        assert {s.labels["transfer"] for s in got["reservoir_stream_rtt_seconds"]} == {tid}
        assert got["reservoir_transfer_throughput_bytes_per_second"][0].value >= 0
        newest = samples[-1]["time"]
        assert all(
            s["time"] > newest
            for s in listed(c.get(f"/transfers/{tid}/streams", params={"since": newest}))
        )
        assert samples == sorted(samples, key=lambda s: s["time"])
        wait(c, tid, completed)
        assert ended.wait(15), "the live feed did not end after completion"
        reader.join(5)
        assert c.get("/transfers/no-such/streams").status_code == 404
    kinds = [name for name, _ in feed]
    assert "samples" in kinds and "event" in kinds
    assert all(s["copy_id"] in copies for name, data in feed if name == "samples" for s in data)
    states = [data["state"] for name, data in feed if name == "transfer"]
    assert states[-1] == "completed"
