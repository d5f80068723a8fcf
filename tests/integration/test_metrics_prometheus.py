"""The metrics of a real coordinator and two real agents during a transfer (the site of
test_server_scheduler.py: agent a copies its files into agent b's LUNs): each
``/metrics``, scraped while the transfer runs, passes ``promtool check metrics``; a
real Prometheus server (Debian's ``prometheus``) scraping all three with the shipped
scrape example's jobs and token files answers every query of the shipped Grafana
dashboard, and with data for every panel but those of NIC pacing (off here); the
agents send heartbeats, as configured agents do."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from reservoir.agent.control import AgentSettings
from reservoir.common.tokens import hash_token
from reservoir.lab.peers import free_port, stop_process, wait_port
from reservoir.server.app.core.agent_credentials import AgentCredentials
from reservoir.shipped import config_dir

from .test_server_scheduler import USER, Site, agent, completed, coordinator, wait

pytestmark = pytest.mark.integration

PROMETHEUS_TOKEN = "itest-prometheus-token-0123456789"  # every agent accepts it
SCRAPE_INTERVAL = 0.5  # seconds: the transfer lasts a few
RATE_INTERVAL = "2s"  # what Grafana's $__rate_interval is at that interval (4 of them)
NO_DATA_HERE = {"NIC pacing rate", "NICs not paced"}  # the transfer paces no NIC
Json = dict[str, Any]


@dataclass
class Observed:
    """What the transfer left: the three scrapes taken while it ran, when it ran, and
    the Prometheus server that scraped it (None where it is not installed)."""

    scrapes: dict[str, str]
    started: float
    ended: float
    prometheus: str | None


def accepting(settings: AgentSettings, token: str) -> AgentSettings:
    """``settings`` with ``token`` accepted too (by its digest, as a file gives it)."""
    return settings.model_copy(update={"tokens": [*settings.tokens, SecretStr(hash_token(token))]})


def beating(settings: AgentSettings, name: str, site: Site, folder: Path) -> AgentSettings:
    """``settings`` sending heartbeats to the site's coordinator every second, with the
    heartbeat token the coordinator's key derives for ``name``, the agent's registered
    name."""
    token = folder / f"{name}.heartbeat"
    token.write_text(AgentCredentials.from_file(site.key).heartbeat_token(name) + "\n")
    token.chmod(0o600)
    update = {
        "coordinator": f"http://127.0.0.1:{site.port}",
        "coordinator_token_file": token,
        "heartbeat_interval": 1.0,
    }
    return settings.model_copy(update=update)


def scrape_config(site: Site) -> str:
    """The shipped scrape example, aimed at this site's coordinator and agents and
    scraping every SCRAPE_INTERVAL (its jobs, paths and token files as shipped)."""
    text = (config_dir() / "prometheus" / "prometheus.yml").read_text()
    every = f"{int(SCRAPE_INTERVAL * 1000)}ms"
    for old, new in (
        ("scrape_interval: 15s", f"scrape_interval: {every}"),
        ("scrape_timeout: 10s", f"scrape_timeout: {every}"),
        ("evaluation_interval: 15s", f"evaluation_interval: {every}"),
        ("coordinator.example.org:8470", f"127.0.0.1:{site.port}"),
        ("storage-01.example.org:8740", f"127.0.0.1:{site.a.port}"),
        ("storage-02.example.org:8740", f"127.0.0.1:{site.b.port}"),
    ):
        assert old in text, f"the scrape example no longer has {old!r}"
        text = text.replace(old, new)
    return text


@contextmanager
def prometheus(folder: Path, site: Site) -> Iterator[str | None]:
    """A Prometheus server scraping ``site`` (its URL), stopped by PID at the end;
    None where Prometheus is not installed."""
    if shutil.which("prometheus") is None:
        yield None
        return
    (folder / "tokens").mkdir(parents=True)
    (folder / "tokens" / "coordinator.token").write_text(USER + "\n")
    (folder / "tokens" / "agents.token").write_text(PROMETHEUS_TOKEN + "\n")
    (folder / "prometheus.yml").write_text(scrape_config(site))
    port = free_port()
    log = open(folder / "prometheus.log", "wb")  # noqa: SIM115  # closed below
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_port("127.0.0.1", port, timeout=30, proc=proc)
        url = f"http://127.0.0.1:{port}"
        ready(url)
        yield url
    finally:
        stop_process(proc)
        log.close()


def ready(url: str) -> None:
    deadline = time.monotonic() + 30
    while httpx.get(f"{url}/-/ready", timeout=5).status_code != 200:
        assert time.monotonic() < deadline, "Prometheus did not become ready"
        time.sleep(0.1)


def scraping(url: str | None, targets: int) -> None:
    """Waits until Prometheus scrapes ``targets`` targets, each with success (it
    discovers them some seconds after its start)."""
    deadline = time.monotonic() + 30
    while url is not None:
        active = httpx.get(f"{url}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
        if len(active) == targets and all(t["health"] == "up" for t in active):
            return
        assert time.monotonic() < deadline, [t["lastError"] for t in active]
        time.sleep(0.2)


def scrape(url: str, token: str) -> str:
    r = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.text


def streams_running(text: str) -> bool:
    """Whether an agent's scrape has the state of running streams."""
    for family in text_string_to_metric_families(text):
        if family.name == "reservoir_copy_stream_cwnd_bytes":
            return len(family.samples) >= 2
    return False


def run_transfer(c: httpx.Client, site: Site) -> tuple[dict[str, str], float, float]:
    """A transfer, scraped by the test once agent a's streams run; the scrapes, and when
    it started and ended."""
    urls = {
        "coordinator": (f"http://127.0.0.1:{site.port}", USER),
        "agent a": (f"http://127.0.0.1:{site.a.port}", PROMETHEUS_TOKEN),
        "agent b": (f"http://127.0.0.1:{site.b.port}", PROMETHEUS_TOKEN),
    }
    started = time.time()
    tid = site.register(c)["id"]
    deadline = time.monotonic() + 30
    while not streams_running(scrape(*urls["agent a"])):
        assert time.monotonic() < deadline, "agent a's streams never showed"
        time.sleep(0.1)
    scrapes = {name: scrape(*where) for name, where in urls.items()}
    wait(c, tid, completed)
    ended = time.time()
    time.sleep(3 * SCRAPE_INTERVAL)  # Prometheus scrapes the end too
    return scrapes, started, ended


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    tmp = tmp_path_factory.mktemp("site")
    site = Site(tmp, f"sqlite:///{tmp / 'server.db'}")
    site.a, site.b = (
        beating(accepting(s, PROMETHEUS_TOKEN), name, site, tmp)
        for s, name in ((site.a, "a"), (site.b, "b"))
    )
    with prometheus(tmp / "prometheus", site) as url:
        with ExitStack() as stack:
            stack.enter_context(agent(site.a))
            stack.enter_context(agent(site.b))
            c = stack.enter_context(coordinator(site))
            scraping(url, 3)
            scrapes, started, ended = run_transfer(c, site)
        site.assert_copied()
        yield Observed(scrapes, started, ended, url)


# ---------------------------------------------------------------- promtool


@pytest.mark.parametrize("which", ["coordinator", "agent a", "agent b"])
def test_promtool_finds_no_problem_in_a_scrape_during_a_transfer(
    observed: Observed, which: str
) -> None:
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    text = observed.scrapes[which]
    assert "reservoir_build_info" in text
    run = subprocess.run(
        ["promtool", "check", "metrics"],
        input=text,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (run.returncode, run.stdout + run.stderr) == (0, "")


# ---------------------------------------------------------------- the dashboard


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of the shipped dashboard, its variables
    set as Grafana sets them: the coordinator's job, every agent."""
    model: Json = json.loads((config_dir() / "grafana" / "reservoir.json").read_text())
    out = []
    for panel in model["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", RATE_INTERVAL)
            expr = expr.replace("$coordinator", "reservoir-coordinator").replace("$agent", ".*")
            out.append((panel["title"], expr))
    return out


def query_range(url: str, expr: str, observed: Observed) -> list[Json]:
    """The series ``expr`` gives over the transfer (Prometheus' HTTP API)."""
    r = httpx.get(
        f"{url}/api/v1/query_range",
        params={
            "query": expr,
            "start": observed.started,
            "end": observed.ended + SCRAPE_INTERVAL,
            "step": SCRAPE_INTERVAL,
        },
        timeout=30,
    )
    body: Json = r.json()
    assert r.status_code == 200 and body["status"] == "success", (expr, body)
    result: list[Json] = body["data"]["result"]
    return result


def test_prometheus_scraped_every_target_with_the_example_tokens(observed: Observed) -> None:
    if observed.prometheus is None:
        pytest.skip("Prometheus is not installed (Debian package prometheus)")
    series = query_range(observed.prometheus, 'up{job=~"reservoir-.*"}', observed)
    assert sorted(s["metric"]["job"] for s in series) == [
        "reservoir-agents",
        "reservoir-agents",
        "reservoir-coordinator",
    ]
    took = {
        s["metric"]["instance"]: dict(s["values"])
        for s in query_range(
            observed.prometheus, 'scrape_duration_seconds{job=~"reservoir-.*"}', observed
        )
    }
    for s in series:  # scraped, and with the token accepted, while the transfer ran
        values = dict(s["values"])
        assert "1" in values.values(), s
        # a scrape that failed only ran out of time (the 2 cores busy with the copy);
        # a refused token fails at once
        failed = [at for at, value in values.items() if value != "1"]
        durations = took[s["metric"]["instance"]]
        assert all(float(durations[at]) >= 0.9 * SCRAPE_INTERVAL for at in failed), (s, durations)


@pytest.mark.parametrize(("title", "expr"), panel_queries())
def test_prometheus_answers_each_dashboard_query(observed: Observed, title: str, expr: str) -> None:
    if observed.prometheus is None:
        pytest.skip("Prometheus is not installed (Debian package prometheus)")
    series = query_range(observed.prometheus, expr, observed)
    if title not in NO_DATA_HERE:
        assert series, f"{title}: no data for {expr}"


def test_the_dashboards_variables_find_their_values(observed: Observed) -> None:
    if observed.prometheus is None:
        pytest.skip("Prometheus is not installed (Debian package prometheus)")
    model: Json = json.loads((config_dir() / "grafana" / "reservoir.json").read_text())
    for variable in model["templating"]["list"]:
        found = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["definition"])
        assert found is not None, variable["definition"]
        metric, label = found.groups()
        series = query_range(observed.prometheus, metric, observed)
        assert series and all(label in s["metric"] for s in series), variable["name"]
