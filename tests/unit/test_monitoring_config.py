"""The shipped Grafana dashboard and Prometheus scrape example against what the
coordinator and an agent export: every metric a dashboard query names is in a real
scrape of one of them (the coordinator's metrics over an empty database, the agent's
``/metrics`` through its app), both scrapes pass ``promtool check metrics``, and the
scrape example passes ``promtool check config``."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reservoir.agent.control import Agent, AgentSettings, create_app
from reservoir.server.app import db, metrics
from reservoir.shipped import config_dir

TOKEN = "unit-token-0123456789abcdef"
DASHBOARD = config_dir() / "grafana" / "reservoir.json"
SCRAPE_EXAMPLE = config_dir() / "prometheus" / "prometheus.yml"
METRIC = re.compile(r"\breservoir_[a-z_]+")
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
Json = dict[str, Any]


def dashboard() -> Json:
    data: Json = json.loads(DASHBOARD.read_text())
    return data


def panels(model: Json) -> Iterator[Json]:
    """Every panel, those inside rows too; rows themselves are not panels."""
    for panel in model["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def expressions(model: Json) -> list[str]:
    """Every PromQL text of the dashboard: its panels' queries and its variables'."""
    out = [t["expr"] for p in panels(model) for t in p["targets"]]
    return out + [v["definition"] for v in model["templating"]["list"]]


def exported(text: str) -> set[str]:
    """The series names an exposition has, counters with their ``_total`` and
    ``_created``: every family declared, even one without samples now."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        if family.type == "counter":
            names |= {f"{family.name}_total", f"{family.name}_created"}
        else:
            names.add(family.name)
    return names


@pytest.fixture(scope="module")
def coordinator_scrape(tmp_path_factory: pytest.TempPathFactory) -> str:
    engine = db.make_engine(f"sqlite:///{tmp_path_factory.mktemp('coordinator') / 'server.db'}")
    db.upgrade(engine)
    try:
        with db.make_sessions(engine)() as session:
            return metrics.render(session).decode()
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def agent_scrape(tmp_path_factory: pytest.TempPathFactory) -> str:
    settings = AgentSettings(
        name="unit",
        tokens=[TOKEN],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        state_dir=tmp_path_factory.mktemp("agent") / "state",
        cwnd_caps="off",
        nic_pacing=False,
    )
    transport = httpx.ASGITransport(app=create_app(Agent(settings)))

    async def get() -> httpx.Response:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://agent") as c:
            return await c.get("/metrics", headers=headers)

    r = asyncio.run(get())
    assert r.status_code == 200, r.text
    return r.text


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    return subprocess.run(
        ["promtool", *args], input=stdin, check=False, capture_output=True, text=True, timeout=60
    )


# ---------------------------------------------------------------- the dashboard


def test_the_dashboard_is_a_grafana_model_with_a_prometheus_input() -> None:
    model = dashboard()
    assert model["schemaVersion"] == 39 and model["uid"] == "reservoir" and model["id"] is None
    (source,) = model["__inputs"]
    assert (source["name"], source["type"], source["pluginId"]) == (
        "DS_PROMETHEUS",
        "datasource",
        "prometheus",
    )
    for panel in panels(model):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"] and all(t["datasource"] == DATASOURCE for t in panel["targets"])
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
    assert all(v["datasource"] == DATASOURCE for v in model["templating"]["list"])


def test_the_dashboards_panels_have_unique_ids_and_do_not_overlap() -> None:
    model = dashboard()
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))
    taken: set[tuple[int, int]] = set()
    for p in model["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        cells = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & taken, f"{p['title']} overlaps another panel"
        taken |= cells


def test_every_metric_the_dashboard_names_is_exported(
    coordinator_scrape: str, agent_scrape: str
) -> None:
    names = exported(coordinator_scrape) | exported(agent_scrape)
    used = {name for expr in expressions(dashboard()) for name in METRIC.findall(expr)}
    assert len(used) > 20  # the regex finds the names
    assert used - names == set()


def test_the_drift_check_sees_a_name_nobody_exports(agent_scrape: str) -> None:
    assert "reservoir_copy_bytes_total" not in exported(agent_scrape)
    assert "reservoir_copy_copied_bytes_total" in exported(agent_scrape)


# ---------------------------------------------------------------- promtool


@pytest.mark.parametrize("which", ["coordinator_scrape", "agent_scrape"])
def test_promtool_finds_no_problem_in_a_scrape(which: str, request: pytest.FixtureRequest) -> None:
    text: str = request.getfixturevalue(which)
    run = promtool("check", "metrics", stdin=text)
    assert (run.returncode, run.stdout + run.stderr) == (0, "")


def test_promtool_sees_a_counter_without_total() -> None:
    bad = "# HELP x_bytes bytes\n# TYPE x_bytes counter\nx_bytes 1\n"
    run = promtool("check", "metrics", stdin=bad)
    assert run.returncode != 0 and "_total" in run.stdout + run.stderr


def test_promtool_accepts_the_scrape_example(tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    shutil.copy(SCRAPE_EXAMPLE, config)
    (tmp_path / "tokens").mkdir()
    for name in ("coordinator.token", "agents.token"):  # the files it names, beside it
        (tmp_path / "tokens" / name).write_text("a-token-0123456789abcdef\n")
    run = promtool("check", "config", str(config))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout
