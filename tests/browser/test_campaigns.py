"""The dashboard's campaign pages in a real browser (Debian's Chromium through
Playwright).

Against the lab's coordinator (conftest.py): a run imported through the API shows its
summary table (the section 6 ratios, targets met or missed) and its HTML report in the
iframe; the start form shows the API's error under the campaign field. Against a second
coordinator of this module (listening in the lab's namespace too), whose campaign
runner is a stand-in keeping the runner's contract (progress.json, results.json;
SIGTERM ends it cancelled): a running campaign's page follows its progress and is
cancelled from its button.
"""

from __future__ import annotations

import socket
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from playwright.sync_api import Page, expect

from reservoir.campaigns.results import (
    CampaignRun,
    Failover,
    Interval,
    Machine,
    PathInfo,
    Run,
    Sample,
    Scenario,
    Stream,
    Topology,
)
from reservoir.lab.coord_site import inside
from reservoir.lab.dashboard_shots import DashboardLab
from reservoir.server import ServerSettings, create_app

from .conftest import Shot

pytestmark = pytest.mark.integration

Json = dict[str, Any]
USER = "browser-campaigns-user-token-0123456789"


def results(run_id: str) -> CampaignRun:
    """iperf3 and reservoir with 4 streams over 2 x 500 Mbit/s, and a failover run
    whose lost seconds miss the target."""
    ticks = [float(t) for t in range(1, 21)]

    def run(sc: Scenario, goodput: float, **extra: Any) -> Run:
        busy = None if sc.tool == "iperf3" else 0.75  # the agents' TCP_INFO says
        streams = [
            Stream(
                f"s{k}",
                "l1" if k % 2 else "l2",
                [Sample(t, goodput / 4, busy=busy, rwnd_limited=busy and 0.05) for t in ticks],
            )
            for k in range(4)
        ]
        return Run(
            scenario=sc,
            repetition=0,
            started=1_795_000_000.0,
            seconds=20.0,
            bytes=int(goodput * 20 / 8),
            goodput_bps=goodput,
            cpu_seconds=4.0,
            intervals=[Interval(t, goodput) for t in ticks],
            streams=streams,
            **extra,
        )

    ipf = Scenario(name="iperf3-s4", tool="iperf3", streams=4, duration_s=20.0)
    res = Scenario(name="reservoir-s4", tool="reservoir", streams=4, equalizer=True)
    cut = Scenario(name="reservoir-s4-failover", tool="reservoir", streams=4, equalizer=False)
    return CampaignRun(
        campaign="lfn-2x500m-100ms",
        run_id=run_id,
        started=1_795_000_000.0,
        finished=1_795_000_300.0,
        machine=Machine(cores=2, kernel="6.18.0", cc_available=["bbr", "cubic"]),
        topology=Topology(
            kind="lab",
            spec="config/lab/lfn-2x500m-100ms.toml",
            bottleneck_bps=1e9,
            paths=[PathInfo("l1", 500e6, 100.0, 0.0), PathInfo("l2", 500e6, 100.0, 0.0)],
        ),
        runs=[
            run(ipf, 940e6),
            run(res, 960e6, jain=0.995),
            run(cut, 700e6, failover=Failover(1.6, 1.2)),
        ],
    )


# ---------------------------------------------------------------- the lab's coordinator


@pytest.fixture
def signed_in(page: Page, lab: DashboardLab) -> Page:
    page.goto(f"{lab.base}/")
    page.fill("#token", lab.token)
    page.click("#login button[type=submit]")
    page.wait_for_selector("header.top")
    return page


def imported(lab: DashboardLab) -> str:
    body = results(f"browser-{uuid.uuid4().hex[:8]}").to_json()
    r = lab.call("POST", "/campaigns/results", body)
    assert r.status_code == 201, r.text
    run_id: str = r.json()["id"]
    return run_id


def test_an_imported_run_shows_its_summary_and_report(
    signed_in: Page, lab: DashboardLab, screenshot: Shot
) -> None:
    page = signed_in
    run_id = imported(lab)
    page.goto(f"{lab.base}/#/campaigns")
    row = page.locator(f"tr[data-run-id='{run_id}']")
    expect(row).to_have_attribute("data-state", "completed")
    expect(row).to_contain_text("lfn-2x500m-100ms (imported)")
    expect(row.locator(".progress")).to_contain_text("3 of 3 runs")
    screenshot(page, "campaigns-list")

    row.locator("a").click()
    summary = page.locator("#campaign-summary")
    res = summary.locator("tr[data-scenario='reservoir-s4']")
    expect(res.locator("td[data-column='of_bottleneck']")).to_have_text("0.960")
    expect(res.locator("td[data-column='of_bottleneck']")).to_have_class("num met")
    expect(res.locator("td[data-column='of_iperf3']")).to_have_text("1.021")
    expect(res.locator("td[data-column='jain']")).to_have_text("0.995")
    expect(res.locator("td[data-column='cpu_s_per_gb']")).to_have_text("1.67")
    expect(res.locator("td[data-column='idle']")).to_have_text("25%")
    expect(res.locator("td[data-column='rwnd_limited']")).to_have_text("5%")
    cut = summary.locator("tr[data-scenario='reservoir-s4-failover']")
    expect(cut.locator("td[data-column='failover_lost_s']")).to_have_text("1.60 s")
    expect(cut.locator("td[data-column='failover_lost_s']")).to_have_class("num missed")
    expect(cut.locator("td[data-column='back_after_s']")).to_have_class("num met")
    expect(summary.locator("tr[data-scenario]")).to_have_count(3)
    expect(page.locator("#campaign-progress")).to_have_attribute("data-done", "3")

    frame = page.locator("#campaign-report iframe")
    expect(frame).to_have_attribute("data-loaded", "true")
    report = page.frame_locator("#campaign-report iframe")
    expect(report.locator("h1")).to_contain_text("lfn-2x500m-100ms")
    expect(report.locator("table", has_text="/bottleneck")).to_contain_text("reservoir-s4-failover")
    assert report.locator("svg").count() > 0
    screenshot(page, "campaign-run-imported")


def test_the_start_form_shows_the_apis_error_under_the_campaign(
    signed_in: Page, lab: DashboardLab, screenshot: Shot
) -> None:
    page = signed_in
    before = lab.call("GET", "/campaigns").json()
    page.goto(f"{lab.base}/#/campaigns")
    expect(page.locator("#f-campaign option[value='loopback']")).to_contain_text("35 scenarios")
    page.select_option("#f-campaign", "loopback")
    page.check("#f-quick")
    expect(page.locator("#campaign-about")).to_contain_text("15 scenarios \u00d7 1")
    page.select_option("#f-campaign", "__file")
    page.fill("#f-campaign-file", "config/campaigns/nope.toml")
    page.click("#start-campaign")
    error = page.locator("[data-field='campaign'] [data-error-for='campaign']")
    expect(error).to_contain_text("no campaign 'config/campaigns/nope.toml'")
    expect(error).to_contain_text("loopback")
    expect(page.locator("[data-field='campaign']")).to_have_class("field invalid")
    expect(page.locator("[data-error-for='_form']")).to_be_empty()
    screenshot(page, "campaign-form-error")
    assert lab.call("GET", "/campaigns").json() == before


# ---------------------------------------------------------------- a live run, on loopback

STAND_IN = textwrap.dedent(
    """
    import json, os, signal, sys, time
    template, args = sys.argv[1], sys.argv[2:]
    out = args[args.index("--out") + 1]

    def put(name, data):
        tmp = os.path.join(out, "." + name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, os.path.join(out, name))

    def progress(state, done, scenario):
        put("progress.json", {"state": state, "done": done, "total": 3, "scenario": scenario,
                              "repetition": 1, "elapsed_s": 40.0 * done + 5,
                              "eta_s": 40.0 * (3 - done), "error": None})

    def stop(signum, frame):
        progress("cancelled", 1, None)
        sys.exit(143)

    signal.signal(signal.SIGTERM, stop)
    full = json.load(open(template))
    progress("running", 0, "iperf3-s4")
    time.sleep(1.5)
    put("results.json", dict(full, finished=None, runs=full["runs"][:1]))
    progress("running", 1, "reservoir-s4")
    time.sleep(60)
    """
)


@pytest.fixture(scope="module")
def local(lab: DashboardLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second coordinator, in this process, whose campaign runner is the stand-in; its
    URL. Its socket is opened in the lab's namespace, where the browser runs."""
    work = tmp_path_factory.mktemp("campaigns-local")
    (work / "stand_in.py").write_text(STAND_IN)
    results("local-1").save(work / "template.json")
    settings = ServerSettings(
        database_url=f"sqlite:///{work / 'server.db'}",
        user_tokens=[USER],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        scheduler="off",
        campaign_command=[sys.executable, str(work / "stand_in.py"), str(work / "template.json")],
    )
    with inside(lab.ns):
        sock = socket.socket()
        sock.bind((lab.coordinator.addr, 0))
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="campaigns")
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the coordinator did not start"
        time.sleep(0.02)
    try:
        yield f"http://{lab.coordinator.addr}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@pytest.fixture
def local_page(page: Page, local: str) -> Page:
    page.goto(f"{local}/")
    page.fill("#token", USER)
    page.click("#login button[type=submit]")
    page.wait_for_selector("header.top")
    return page


def test_a_running_campaign_shows_live_progress_and_is_cancelled(
    local_page: Page, local: str, lab: DashboardLab, screenshot: Shot
) -> None:
    page = local_page
    page.goto(f"{local}/#/campaigns")
    page.select_option("#f-campaign", "loopback")
    page.check("#f-quick")
    page.click("#start-campaign")
    created = page.locator("#campaign-form-result a[data-created]")
    expect(created).to_be_visible()
    run_id = created.get_attribute("data-created")
    headers = {"Authorization": f"Bearer {USER}"}
    try:
        expect(page.locator(f"tr[data-run-id='{run_id}']")).to_have_attribute(
            "data-state", "running"
        )
        created.click()
        progress = page.locator("#campaign-progress")
        expect(progress).to_have_attribute("data-done", "0")
        expect(progress).to_have_attribute("data-done", "1", timeout=15_000)
        expect(progress).to_contain_text("1 of 3 runs · ETA 1m 20s")
        expect(page.locator("#campaign-now")).to_contain_text("Now: reservoir-s4 (repetition 1)")
        expect(page.locator("#campaign-summary tr[data-scenario]")).to_have_count(1)
        expect(page.locator("#campaign-report iframe")).to_have_attribute("data-loaded", "true")
        screenshot(page, "campaign-run-live")
        page.click("#cancel-campaign")
        expect(progress).to_have_attribute("data-state", "cancelled", timeout=15_000)
        expect(page.locator("#campaign-facts")).to_contain_text("runner exit status 143")
        expect(page.locator("#cancel-campaign")).to_have_count(0)
        screenshot(page, "campaign-run-cancelled")
    finally:
        with inside(lab.ns):
            httpx.post(f"{local}/api/v1/campaigns/{run_id}/cancel", headers=headers, timeout=10)
