"""Campaign runs on the coordinator: ``/api/v1/campaigns`` with its lifespan (the
watcher) running, and a stand-in runner script that keeps the runner's contract
(progress.json, results.json, log.txt, exit status 0/1/143) without building a lab."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from reservoir.campaigns import _spec
from reservoir.campaigns.results import (
    CampaignRun,
    Interval,
    Machine,
    PathInfo,
    Run,
    Sample,
    Scenario,
    Stream,
    Topology,
)
from reservoir.server import ServerSettings, create_app
from reservoir.server.app import db
from reservoir.server.app.core.agent_credentials import AgentCredentials
from reservoir.server.app.core.config import DEFAULT_MAX_BODY_BYTES
from reservoir.server.app.tables import CampaignRun as RunRow
from reservoir.server.app.tables import new_id, utcnow
from reservoir.server.clients.campaign_upload import add_upload_parser

USER = "unit-user-token-0123456789abcdef"
Json = dict[str, Any]

# The stand-in runner: CAMPAIGN [--quick] --out DIR after its MODE and the results to
# copy. It writes one run's progress and partial results, waits for DIR/go (or a
# SIGTERM), then ends as MODE says.
FAKE_RUNNER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    mode, template = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    out = args[args.index("--out") + 1]
    quick = "--quick" in args

    def put(name, data):
        tmp = os.path.join(out, "." + name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, os.path.join(out, name))

    def log(line):
        with open(os.path.join(out, "log.txt"), "a") as f:
            f.write(line + "\\n")

    def progress(state, done, error=None):
        put("progress.json", {"state": state, "done": done, "total": 2,
                              "scenario": "reservoir-s4" if state == "running" else None,
                              "repetition": 1, "elapsed_s": 12.5,
                              "eta_s": 30.0 if state == "running" else None, "error": error})

    def cancelled(signum, frame):
        log("SIGTERM: cleaning the lab up")
        progress("cancelled", 1)
        sys.exit(143)

    signal.signal(signal.SIGTERM, cancelled)
    log(f"campaign {args[0]} quick={quick}")
    if "--coordinator" in args:
        coordinator = args[args.index("--coordinator") + 1]
        token = os.environ.get("RESERVOIR_TOKEN")
        log(f"coordinator {coordinator} token {token} in argv {token in sys.argv}")
    if mode == "crash":
        log("env " + repr(sorted(k for k in os.environ if k.startswith("RESERVOIR_SERVER_"))))
        log("building the lab")
        raise RuntimeError("the lab could not be built: no such device l1")
    results = json.load(open(template))
    partial = dict(results, finished=None, runs=results["runs"][:1])
    progress("running", 1)
    put("results.json", partial)
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(out, "go")) and time.monotonic() < deadline:
        time.sleep(0.02)
    if mode == "fail":
        log("run 2: iperf3: error - unable to connect to server")
        progress("failed", 2, "run 2 (iperf3-s4) failed: unable to connect")
        put("results.json", results)
        sys.exit(1)
    put("results.json", results)
    with open(os.path.join(out, "report.html"), "w") as f:
        f.write("<html><body><h1>runner report</h1></body></html>")
    progress("completed", 2)
    log("done")
    """
)


def sample_results(seconds: int = 10, streams: int = 4) -> CampaignRun:
    """Two scenarios of one repetition: iperf3 and reservoir over 2 x 500 Mbit/s, with
    ``streams`` streams sampled every second for ``seconds``."""
    ticks = [float(t) for t in range(1, seconds + 1)]

    def run(sc: Scenario, goodput: float, jain: float | None) -> Run:
        per_stream = goodput / streams
        samples = [
            Stream(f"s{k}", "l1" if k % 2 else "l2", [Sample(t, per_stream) for t in ticks])
            for k in range(streams)
        ]
        return Run(
            scenario=sc,
            repetition=0,
            started=1_795_000_000.0,
            seconds=10.0,
            bytes=int(goodput * 10 / 8),
            goodput_bps=goodput,
            cpu_seconds=3.0,
            intervals=[Interval(t, goodput) for t in ticks],
            streams=samples,
            jain=jain,
        )

    ipf = Scenario(name="iperf3-s4", tool="iperf3", streams=4, duration_s=10.0)
    res = Scenario(name="reservoir-s4", tool="reservoir", streams=4, equalizer=True)
    return CampaignRun(
        campaign="lfn-2x500m-100ms",
        run_id="20261122-101500",
        started=1_795_000_000.0,
        finished=1_795_000_100.0,
        machine=Machine(cores=2, kernel="6.18.0", cc_available=["bbr", "cubic"]),
        topology=Topology(
            kind="lab",
            spec="config/lab/lfn-2x500m-100ms.toml",
            bottleneck_bps=1e9,
            paths=[PathInfo("l1", 500e6, 100.0, 0.0), PathInfo("l2", 500e6, 100.0, 0.0)],
        ),
        runs=[run(ipf, 940e6, None), run(res, 960e6, 0.995)],
    )


@pytest.fixture
def template(tmp_path: Path) -> Path:
    path = tmp_path / "template.json"
    sample_results().save(path)
    return path


@pytest.fixture
def fake_runner(tmp_path: Path) -> Path:
    path = tmp_path / "fake_runner.py"
    path.write_text(FAKE_RUNNER)
    return path


Settings = Callable[..., ServerSettings]


@pytest.fixture
def settings(tmp_path: Path, fake_runner: Path, template: Path) -> Settings:
    """Settings whose campaign runner is the stand-in in ``mode``."""

    def make(mode: str = "complete") -> ServerSettings:
        return ServerSettings(
            database_url=f"sqlite:///{tmp_path / 'server.db'}",
            user_tokens=[USER],  # type: ignore[list-item]  # pydantic makes it a SecretStr
            scheduler="off",
            campaign_command=[sys.executable, str(fake_runner), mode, str(template)],
        )

    return make


@contextmanager
def coordinator(settings: ServerSettings) -> Iterator[httpx.Client]:
    """The app on uvicorn in a thread of its own, with its lifespan (migrations, the
    campaign watcher every 50 ms), on a loopback port of its own."""
    app = create_app(settings)
    app.state.campaigns.interval = 0.05
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="coordinator")
    thread.start()
    try:
        _wait(lambda: server.started or not thread.is_alive(), "the coordinator")
        assert server.started, "the coordinator did not start"
        headers = {"Authorization": f"Bearer {USER}"}
        url = f"http://127.0.0.1:{port}/api/v1"
        with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
            yield c
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@pytest.fixture
def runners(tmp_path: Path) -> Iterator[list[int]]:
    """PIDs of stand-in runners a test started; any left is killed at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        with contextlib.suppress(ChildProcessError):  # reaped by the watcher already
            os.waitpid(pid, 0)


def ok(response: httpx.Response, code: int = 200) -> Any:
    assert response.status_code == code, response.text
    return response.json()


def start(
    c: httpx.Client, runners: list[int], campaign: str = "loopback", quick: bool = True
) -> Json:
    run: Json = ok(c.post("/campaigns", json={"campaign": campaign, "quick": quick}), 202)
    out = Path(run["out_dir"])
    runners.append(_wait(lambda: _pid_with(out), "the runner to start"))
    return run


def _pid_with(out: Path) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if os.fsencode(str(out)) in argv:
                return int(entry.name)
    return None


def _wait(check: Callable[[], Any], what: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def wait_run(c: httpx.Client, run_id: str, until: Callable[[Json], bool], what: str) -> Json:
    def look() -> Json | None:
        run = ok(c.get(f"/campaigns/{run_id}"))
        return run if until(run) else None

    found: Json = _wait(look, what)
    return found


def go(run: Json) -> None:
    (Path(run["out_dir"]) / "go").touch()


def ended(run: Json) -> bool:
    return run["state"] in ("completed", "failed", "cancelled")


# ---------------------------------------------------------------- start, progress, end


def test_a_started_run_shows_the_runners_progress_and_partial_summary(
    settings: Settings, runners: list[int]
) -> None:
    with coordinator(settings()) as c:
        run = start(c, runners)
        assert run["state"] == "running" and run["campaign"] == "loopback" and run["quick"]
        assert run["progress"]["total"] == 15  # the quick subset: 15 scenarios x 1
        seen = wait_run(c, run["id"], lambda r: r["progress"]["done"] == 1, "progress")
        assert seen["progress"] == {
            "done": 1,
            "total": 2,
            "scenario": "reservoir-s4",
            "repetition": 1,
            "elapsed_s": 12.5,
            "eta_s": 30.0,
        }
        seen = wait_run(c, run["id"], lambda r: r["has_results"], "partial results")
        assert [row["scenario"] for row in seen["summary"]] == ["iperf3-s4"]
        go(run)
        wait_run(c, run["id"], ended, "the end")


def test_a_completed_run_is_stored_with_its_results(
    settings: Settings, runners: list[int], template: Path
) -> None:
    with coordinator(settings()) as c:
        run = start(c, runners)
        go(run)
        done = wait_run(c, run["id"], ended, "the end")
        assert done["state"] == "completed" and done["exit_code"] == 0
        assert done["error"] is None and done["finished_at"] is not None
        assert done["run_id"] == "20261122-101500"
        assert ok(c.get(f"/campaigns/{run['id']}/results")) == json.loads(template.read_text())
        rows = {row["scenario"]: row for row in done["summary"]}
        assert rows["reservoir-s4"]["of_iperf3"] == pytest.approx(960 / 940)
        assert rows["reservoir-s4"]["of_bottleneck"] == pytest.approx(0.96)
        assert rows["reservoir-s4"]["checks"]["of_bottleneck"] == {"target": ">= 0.9", "met": True}
        assert rows["reservoir-s4"]["jain"] == pytest.approx(0.995)
        assert done["runs_recorded"] == 2 and done["bottleneck_bps"] == 1e9
        listed = ok(c.get("/campaigns"))
        assert [r["id"] for r in listed] == [run["id"]]
        assert "summary" not in listed[0] and "results" not in listed[0]
        report = c.get(f"/campaigns/{run['id']}/report")
        assert report.status_code == 200 and "runner report" in report.text


def test_a_failed_run_keeps_its_results_and_the_log_tail(
    settings: Settings, runners: list[int]
) -> None:
    with coordinator(settings("fail")) as c:
        run = start(c, runners)
        go(run)
        done = wait_run(c, run["id"], ended, "the end")
    assert done["state"] == "failed" and done["exit_code"] == 1
    assert done["error"].startswith(
        "the runner exited with code 1: run 2 (iperf3-s4) failed: unable to connect"
    )
    assert "--- last lines of log.txt ---" in done["error"]
    assert "iperf3: error - unable to connect to server" in done["error"]
    assert done["has_results"] and len(done["summary"]) == 2


def test_a_runner_dying_without_results_is_failed_with_its_output(
    settings: Settings, runners: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESERVOIR_SERVER_ENVIRONMENT", "production")  # not for the runner
    with coordinator(settings("crash")) as c:
        run = ok(c.post("/campaigns", json={"campaign": "loopback"}), 202)
        done = wait_run(c, run["id"], ended, "the end")
    assert done["state"] == "failed" and done["exit_code"] == 1  # Python's uncaught exception
    assert done["error"].startswith("the runner exited with code 1")
    assert "building the lab" in done["error"]  # log.txt's tail
    assert "env []" in done["error"]  # the coordinator's settings stay with it
    assert not done["has_results"]


def test_a_second_run_is_refused_while_one_runs(settings: Settings, runners: list[int]) -> None:
    with coordinator(settings()) as c:
        run = start(c, runners)
        second = c.post("/campaigns", json={"campaign": "failover", "quick": True})
        assert second.status_code == 409
        assert run["id"] in second.json()["detail"] and "one campaign" in second.json()["detail"]
        go(run)
        wait_run(c, run["id"], ended, "the end")
        again = start(c, runners)
        go(again)
        wait_run(c, again["id"], ended, "the end")


def test_cancel_stops_the_runner_and_ends_cancelled(settings: Settings, runners: list[int]) -> None:
    with coordinator(settings()) as c:
        run = start(c, runners)
        wait_run(c, run["id"], lambda r: r["progress"]["done"] == 1, "progress")
        cancelling = ok(c.post(f"/campaigns/{run['id']}/cancel"), 202)
        assert cancelling["state"] == "cancelling"
        done = wait_run(c, run["id"], ended, "the end")
        assert done["state"] == "cancelled" and done["exit_code"] == 143
        log = (Path(run["out_dir"]) / "log.txt").read_text()
        assert "SIGTERM: cleaning the lab up" in log
        assert c.post(f"/campaigns/{run['id']}/cancel").status_code == 409


# ---------------------------------------------------------------- bad requests


def test_an_unknown_campaign_is_422_listing_the_shipped_ones(
    settings: Settings, tmp_path: Path
) -> None:
    with coordinator(settings()) as c:
        for name in ("nope", "../../etc/passwd", "/etc/hosts", "campaigns/cli.py", "a\0b"):
            r = c.post("/campaigns", json={"campaign": name})
            assert r.status_code == 422, (name, r.text)
            [error] = r.json()["errors"]
            assert error["loc"] == ["body", "campaign"]
            assert "loopback" in error["msg"] and "lfn-2x500m-100ms" in error["msg"]
        assert ok(c.get("/campaigns")) == []
    assert not (tmp_path / "campaigns").exists()


def test_an_invalid_campaign_file_is_422_with_each_of_its_problems(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = tmp_path / "campaigns-dir"
    shipped.mkdir()
    (shipped / "broken.toml").write_text(
        'name = "broken"\ndescription = "x"\nrepetitions = 0\n[topology]\nkind = "moon"\n'
    )
    monkeypatch.setattr(_spec, "CAMPAIGN_DIR", shipped)
    monkeypatch.setattr("reservoir.campaigns.CAMPAIGN_DIR", shipped)
    with coordinator(settings()) as c:
        r = c.post("/campaigns", json={"campaign": "broken"})
        available = ok(c.get("/campaigns/available"))
    assert r.status_code == 422
    errors = r.json()["errors"]
    assert len(errors) > 1 and all(e["loc"] == ["body", "campaign"] for e in errors)
    assert any("repetitions" in e["msg"] for e in errors)
    assert [a["name"] for a in available] == ["broken"] and "repetitions" in available[0]["error"]


REAL = """
name = "wan"
description = "two registered links"
[topology]
real = { links = ["l1", "l2"], source_set = "vs-a", destination_set = "vs-b" }
source = "site-a"
destination = "site-b"
bottleneck_mbit = 1000
[matrix]
tool = ["iperf3", "reservoir"]
streams = 8
pacing = "per-nic"
duration_s = 30
size = "4GiB"
"""


def test_a_real_campaign_runs_through_this_coordinator_with_the_starters_token(
    settings: Settings, tmp_path: Path, runners: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = tmp_path / "campaigns-dir"
    shipped.mkdir()
    (shipped / "wan.toml").write_text(REAL)
    monkeypatch.setattr(_spec, "CAMPAIGN_DIR", shipped)
    monkeypatch.setattr("reservoir.campaigns.CAMPAIGN_DIR", shipped)
    s = settings()
    with coordinator(s) as c:
        run = start(c, runners, "wan", quick=False)
        log = Path(run["out_dir"]) / "log.txt"
        line = _wait(
            lambda: (
                next((ln for ln in log.read_text().splitlines() if "coordinator" in ln), None)
                if log.exists()
                else None
            ),
            "the runner's log",
        )
        go(run)
        wait_run(c, run["id"], ended, "the end")
    assert line == f"coordinator http://{s.host}:{s.port} token {USER} in argv False"


def test_the_shipped_campaigns_are_listed_with_estimates(settings: Settings) -> None:
    with coordinator(settings()) as c:
        available = {a["name"]: a for a in ok(c.get("/campaigns/available"))}
    loopback = available["loopback"]
    assert loopback["file"] == "config/campaigns/loopback.toml" and loopback["error"] is None
    assert loopback["scenarios"] == 35 and loopback["quick_scenarios"] == 15
    assert loopback["estimate_s"] > loopback["quick_estimate_s"] > 0
    assert {"failover", "lfn-1g-200ms", "lfn-2x500m-100ms", "lossy", "sc2003-scaled"} <= set(
        available
    )


def test_campaigns_need_a_users_token(settings: Settings, tmp_path: Path) -> None:
    with coordinator(settings()) as c:
        assert c.get("/campaigns", headers={"Authorization": ""}).status_code == 401
        ok(c.post("/agents", json={"name": "a1", "control_url": "http://127.0.0.1:9"}), 201)
        token = AgentCredentials.from_file(tmp_path / "server.key").heartbeat_token("a1")
        agent = {"Authorization": f"Bearer {token}"}
        assert c.post("/campaigns", json={"campaign": "loopback"}, headers=agent).status_code == 403
        assert c.get("/campaigns/available", headers=agent).status_code == 403


# ---------------------------------------------------------------- import and report


def test_imported_results_are_stored_with_their_summary_and_report(settings: Settings) -> None:
    data = sample_results().to_json()
    with coordinator(settings()) as c:
        run = ok(c.post("/campaigns/results", json=data), 201)
        assert run["origin"] == "import" and run["state"] == "completed"
        assert run["campaign"] == "lfn-2x500m-100ms" and run["progress"]["done"] == 2
        detail = ok(c.get(f"/campaigns/{run['id']}"))
        assert [r["scenario"] for r in detail["summary"]] == ["iperf3-s4", "reservoir-s4"]
        report = c.get(f"/campaigns/{run['id']}/report")
        assert ok(c.get(f"/campaigns/{run['id']}/results")) == data
        again = c.post("/campaigns/results", json=data)
    assert report.status_code == 200 and report.headers["content-type"].startswith("text/html")
    assert "lfn-2x500m-100ms" in report.text and "<svg" in report.text
    assert "default-src 'none'" in report.headers["content-security-policy"]
    assert again.status_code == 409 and run["id"] in again.json()["detail"]


def test_an_import_with_a_bad_field_is_422_naming_it(settings: Settings) -> None:
    data = sample_results().to_json()
    data["runs"][1]["streams"][2]["samples"][3]["bps"] = "fast"
    with coordinator(settings()) as c:
        r = c.post("/campaigns/results", json=data)
        missing = c.post("/campaigns/results", json={"campaign": "x"})
        assert ok(c.get("/campaigns")) == []
    assert r.status_code == 422
    assert r.json()["errors"] == [
        {
            "loc": ["body", "runs", 1, "streams", 2, "samples", 3, "bps"],
            "msg": "expected a number, got the string 'fast'",
            "type": "value_error",
        }
    ]
    assert missing.status_code == 422 and missing.json()["errors"][0]["loc"] == ["body", "run_id"]


def test_the_api_documents_results_with_the_campaigns_schema(settings: Settings) -> None:
    with coordinator(settings()) as c:
        spec = ok(c.get("/openapi.json"))
    schemas = spec["components"]["schemas"]
    ref = {"$ref": "#/components/schemas/CampaignRun"}
    upload = spec["paths"]["/api/v1/campaigns/results"]["post"]["requestBody"]
    results = spec["paths"]["/api/v1/campaigns/{run_id}/results"]["get"]["responses"]["200"]
    assert upload["content"]["application/json"]["schema"]["$ref"] == ref["$ref"]
    assert results["content"]["application/json"]["schema"] == ref
    run = schemas["CampaignRun"]
    assert run["additionalProperties"] is False
    required = {"campaign", "run_id", "started", "finished", "machine", "topology"}
    assert set(run["required"]) == required
    sample = schemas["Sample"]["properties"]
    assert sample["cap_segments"]["anyOf"][0]["minimum"] == 1
    tools = schemas["Scenario"]["properties"]["tool"]["enum"]
    assert tools == ["iperf3", "reservoir", "gridftp", "xrdcp"]


def test_a_run_without_results_has_no_report(settings: Settings, runners: list[int]) -> None:
    with coordinator(settings("crash")) as c:
        run = ok(c.post("/campaigns", json={"campaign": "loopback"}), 202)
        wait_run(c, run["id"], ended, "the end")
        r = c.get(f"/campaigns/{run['id']}/report")
        unknown = c.get("/campaigns/nope/report")
    assert r.status_code == 404 and "no results of campaign run" in r.json()["detail"]
    assert unknown.status_code == 404 and unknown.json()["detail"] == "no campaign run 'nope'"


# ---------------------------------------------------------------- coordinator restarts


def test_a_runner_alive_across_a_restart_is_followed_to_its_end(
    settings: Settings, runners: list[int]
) -> None:
    with coordinator(settings()) as c:
        run = start(c, runners)
        wait_run(c, run["id"], lambda r: r["progress"]["done"] == 1, "progress")
    with coordinator(settings()) as c:
        assert ok(c.get(f"/campaigns/{run['id']}"))["state"] == "running"
        go(run)
        done = wait_run(c, run["id"], ended, "the end")
    assert done["state"] == "completed" and done["exit_code"] is None  # not our child now
    assert done["has_results"]


def test_a_run_whose_runner_vanished_during_a_restart_is_failed(
    settings: Settings, tmp_path: Path
) -> None:
    with coordinator(settings()) as c:
        pass  # the database, migrated
    out = tmp_path / "campaigns" / "gone"
    out.mkdir(parents=True)
    (out / "log.txt").write_text("[3/6] reservoir-s8 (run 1) ...\n")
    gone = subprocess.Popen(["true"])
    gone.wait()
    pid = gone.pid
    engine = db.make_engine(settings().database_url)
    with db.make_sessions(engine)() as session:
        row = RunRow(
            id=new_id(),
            campaign="loopback",
            quick=False,
            origin="api",
            state="running",
            started_at=utcnow(),
            pid=pid,
            out_dir=str(out),
        )
        session.add(row)
        session.commit()
    engine.dispose()
    with coordinator(settings()) as c:
        done = ok(c.get(f"/campaigns/{row.id}"))
    assert done["state"] == "failed"
    assert done["error"].startswith(
        f"the coordinator restarted while the run was going and its runner (pid {pid}) is gone"
    )
    assert "reservoir-s8 (run 1)" in done["error"]


# ---------------------------------------------------------------- reservoir campaign upload


def upload(argv: list[str]) -> tuple[int, str, str]:
    """``reservoir campaign upload ARGV``: exit status, output, errors."""
    parser = argparse.ArgumentParser(prog="reservoir campaign")
    add_upload_parser(parser.add_subparsers(dest="campaign_command", required=True))
    args = parser.parse_args(["upload", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = args.func(args, out, err)
    return code, out.getvalue(), err.getvalue()


def coordinator_url(c: httpx.Client) -> str:
    return str(c.base_url).removesuffix("/api/v1/")


def test_upload_imports_a_runs_folder(settings: Settings, tmp_path: Path, template: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "results.json").write_bytes(template.read_bytes())
    token = tmp_path / "token"
    token.write_text(USER + "\n")
    with coordinator(settings()) as c:
        url = coordinator_url(c)
        code, out, err = upload([str(folder), "--coordinator", url, "--token-file", str(token)])
        listed = ok(c.get("/campaigns"))
    assert (code, err) == (0, "")
    [run] = listed
    assert run["origin"] == "import" and run["run_id"] == "20261122-101500" and not run["quick"]
    assert out.startswith(f"imported lfn-2x500m-100ms run 20261122-101500 as {run['id']}")
    assert f"{url}/#/campaigns/{run['id']}" in out


def test_upload_refuses_a_bad_file_before_any_request(tmp_path: Path) -> None:
    bad = sample_results().to_json()
    bad["runs"][0]["goodput_bps"] = -1
    path = tmp_path / "results.json"
    path.write_text(json.dumps(bad))
    code, out, err = upload([str(path), "--coordinator", "http://127.0.0.1:9"])
    assert (code, out) == (2, "")
    assert err == (
        f"reservoir campaign upload: {path}: runs[0].goodput_bps: must be >= 0, got -1\n"
    )


def test_upload_reports_a_refused_token(settings: Settings, tmp_path: Path, template: Path) -> None:
    token = tmp_path / "token"
    token.write_text("not-the-coordinators-token-0123456789\n")
    with coordinator(settings()) as c:
        url = coordinator_url(c)
        code, out, err = upload([str(template), "--coordinator", url, "--token-file", str(token)])
        assert ok(c.get("/campaigns")) == []
    assert (code, out) == (1, "")
    assert err == "reservoir campaign upload: HTTP 401 Unauthorized: the token is not valid\n"


def test_upload_of_a_long_run_passes_the_limit_of_other_bodies(
    settings: Settings, tmp_path: Path
) -> None:
    """Ten minutes of 16 streams a second: several MB, over ``max_body_bytes``."""
    path = tmp_path / "results.json"
    sample_results(seconds=600, streams=16).save(path)
    assert path.stat().st_size > 4 * DEFAULT_MAX_BODY_BYTES
    token = tmp_path / "token"
    token.write_text(USER + "\n")
    with coordinator(settings()) as c:
        code, _, err = upload(
            [str(path), "--coordinator", coordinator_url(c), "--token-file", str(token)]
        )
        [run] = ok(c.get("/campaigns"))
        stored = ok(c.get(f"/campaigns/{run['id']}/results"))
    assert (code, err) == (0, ""), err
    assert len(stored["runs"][1]["streams"][15]["samples"]) == 600


def test_upload_over_max_upload_bytes_is_refused_naming_the_setting(
    settings: Settings, tmp_path: Path, template: Path
) -> None:
    token = tmp_path / "token"
    token.write_text(USER + "\n")
    small = settings().model_copy(update={"max_upload_bytes": 4096})
    with coordinator(small) as c:
        url = coordinator_url(c)
        code, out, err = upload([str(template), "--coordinator", url, "--token-file", str(token)])
        assert ok(c.get("/campaigns")) == []
    assert (code, out) == (1, "")
    assert err.startswith("reservoir campaign upload: HTTP 413 ")  # the reason: h11's words
    assert err.endswith("larger than 4096 bytes (the setting max_upload_bytes)\n")


# ---------------------------------------------------------------- settings


def test_campaign_runs_go_beside_the_sqlite_database_unless_data_dir_is_set(
    tmp_path: Path,
) -> None:
    def settings(**extra: Any) -> ServerSettings:
        return ServerSettings(
            environment="development",
            database_url=f"sqlite:///{tmp_path / 'db' / 'server.db'}",
            **extra,
        )

    assert settings().data_path == tmp_path / "db"
    assert settings(data_dir=tmp_path / "data").data_path == tmp_path / "data"
    assert settings().campaign_command == [sys.executable, "-m", "reservoir", "campaign", "run"]
