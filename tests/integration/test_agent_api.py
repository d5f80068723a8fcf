"""The agent's control API on a real uvicorn server in a thread, copying into real targets."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from reservoir.agent.control import Agent, AgentSettings, CopyFn, make_server
from reservoir.agent.target import config as tcfg
from reservoir.agent.transfer import copy as engine_copy
from reservoir.lab.peers import ReservoirTarget, free_port, wait_port

from .gates import WriteGate, gated_copy
from .servers import running

pytestmark = pytest.mark.integration

TOKEN = "test-token-0123456789abcdef"
IQN = "iqn.2026-11.org.reservoir:agent-builtin"
MiB = 1 << 20


def blank(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def random_file(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        for _ in range(size // (8 * MiB)):
            f.write(os.urandom(8 * MiB))
    return path


def sha(path: Path, length: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(length))
    return h.hexdigest()


@contextmanager
def serve_in_thread(settings: AgentSettings, copy_fn: CopyFn = engine_copy) -> Iterator[str]:
    """The agent (API, copies, builtin target) in a uvicorn server of its own thread."""
    with running(make_server(settings, Agent(settings, copy_fn=copy_fn)), "agent-api"):
        yield f"http://{settings.host}:{settings.port}"


SOURCE_VOLUMES = ("src.img", "empty.img", "out.img")  # in tmp_path, besides the LUNs


@contextmanager
def holding_agent(tmp_path: Path, passing: int) -> Iterator[str]:
    """An agent whose first copy run writes ``passing`` bytes and is then held until it
    is paused or cancelled (a resumed run goes free): however late the test acts on the
    copy, it cannot have completed meanwhile."""
    with serve_in_thread(settings_for(tmp_path), gated_copy([WriteGate(passing)])) as url:
        yield url


def settings_for(tmp_path: Path, target_config: Path | None = None) -> AgentSettings:
    return AgentSettings(
        name="agent-test",
        listen=f"127.0.0.1:{free_port()}",
        tokens=[TOKEN],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        state_dir=tmp_path / "state",
        target_config=target_config,
        source_volumes=[tmp_path / name for name in SOURCE_VOLUMES],
        cwnd_caps="pacing-rate",  # the agent runs in the test process: no cgroup move
    )


@contextmanager
def client(url: str, token: str | None = TOKEN) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=30) as c:
        yield c


@pytest.fixture
def api(tmp_path: Path) -> Iterator[str]:
    with serve_in_thread(settings_for(tmp_path)) as url:
        yield url


def start_copy(c: httpx.Client, source: Path, dest: str, **kw: Any) -> dict[str, Any]:
    body = {"source": str(source), "dest": dest, "extent_size": 4 * MiB, **kw}
    r = c.post("/copies", json=body)
    assert r.status_code == 201, r.text
    data: dict[str, Any] = r.json()
    return data


def wait_for(c: httpx.Client, copy_id: str, *states: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data: dict[str, Any] = c.get(f"/copies/{copy_id}").json()
        if data["state"] in states:
            return data
        time.sleep(0.02)
    raise AssertionError(f"copy {copy_id} is still {data['state']}: {data['last_error']}")


def wait_done_bytes(c: httpx.Client, copy_id: str, at_least: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        data = c.get(f"/copies/{copy_id}").json()
        assert data["state"] in ("queued", "running"), data
        if data["progress"]["done_bytes"] >= at_least:
            return
        time.sleep(0.005)
    raise AssertionError("no progress")


# ---------------------------------------------------------------- auth and validation


def test_health_needs_no_token(api: str) -> None:
    with client(api, token=None) as c:
        assert c.get("/health").json() == {"status": "ok"}


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789abcdef", ""])
@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/info"), ("GET", "/copies"), ("POST", "/copies")]
)
def test_missing_or_wrong_token_is_401(api: str, token: str | None, method: str, path: str) -> None:
    with client(api, token=token) as c:
        r = c.request(method, path, json={"source": "/a", "dest": "/b"})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert TOKEN not in r.text


def test_bad_copy_body_is_422_with_field_errors(api: str) -> None:
    with client(api) as c:
        r = c.post("/copies", json={"source": "/a", "streams": 0, "range": {"offset": -1}})
    assert r.status_code == 422
    fields = {tuple(e["loc"]) for e in r.json()["errors"]}
    assert {("body", "dest"), ("body", "streams"), ("body", "range", "offset")} <= fields
    assert ("body", "range", "length") in fields


def test_body_that_is_not_json_is_refused_not_500(api: str) -> None:
    json_type = {"Content-Type": "application/json"}
    with client(api) as c:
        broken = c.post("/copies", content=b"{not json", headers=json_type)
        not_utf8 = c.post("/copies", content=b"\xff{", headers=json_type)
        a_list = c.post("/copies", json=[1, 2])
    assert broken.status_code == 422 and a_list.status_code == 422
    assert not_utf8.status_code == 400


def test_unknown_copy_is_404(api: str) -> None:
    with client(api) as c:
        for r in (
            c.get("/copies/nope"),
            c.post("/copies/nope/pause"),
            c.get("/copies/nope/telemetry"),
            c.put("/copies/nope/caps", json={}),
        ):
            assert r.status_code == 404, r.text
            assert r.json()["detail"] == "no copy 'nope'"


def test_no_cors_headers(api: str) -> None:
    with client(api, token=None) as c:
        r = c.get("/health", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in r.headers


# ---------------------------------------------------------------- copies


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[tuple[ReservoirTarget, Path]]:
    lun = blank(tmp_path / "lun0.img", 128 * MiB)
    log = tmp_path / "target.log"
    with ReservoirTarget(
        [lun], log_path=log, extra=["--nop-interval", "0"], open_access=True
    ) as target:
        yield target, lun
        alive = target.alive()
    assert alive, log.read_text()[-4000:]


def test_copy_into_a_reservoir_target_completes_verified(
    tmp_path: Path, api: str, remote: tuple[ReservoirTarget, Path]
) -> None:
    target, lun = remote
    source = random_file(tmp_path / "src.img", 32 * MiB)
    with client(api) as c:
        created = start_copy(c, source, target.url(0), streams=4)
        assert created["state"] in ("queued", "running")
        done = wait_for(c, created["id"], "completed", "failed")
        telemetry = c.get(f"/copies/{created['id']}/telemetry").json()
        listed = [x["id"] for x in c.get("/copies").json()]
    assert done["state"] == "completed", done["last_error"]
    assert done["summary"]["verified"] and done["summary"]["copied_bytes"] == 32 * MiB
    assert done["progress"]["done_bytes"] == 32 * MiB
    assert sha(lun, 32 * MiB) == sha(source, 32 * MiB)
    assert listed == [created["id"]]
    assert telemetry[-1]["type"] == "progress"  # the engine's last record
    assert {r["type"] for r in telemetry} <= {"progress", "stream", "path"}


def test_the_next_copy_over_a_path_takes_the_warm_sessions_of_the_last(
    tmp_path: Path, api: str, remote: tuple[ReservoirTarget, Path]
) -> None:
    target, lun = remote
    source = random_file(tmp_path / "src.img", 32 * MiB)
    with client(api) as c:
        done = []
        for _ in range(2):
            copy_id = start_copy(c, source, target.url(0), streams=4)["id"]
            done.append(wait_for(c, copy_id, "completed", "failed"))
        warm = c.get("/info").json()["warm_sessions"]
    assert [d["state"] for d in done] == ["completed", "completed"], done
    cold, hot = (d["summary"] for d in done)
    assert cold["verified"] and hot["verified"] and sha(lun, 32 * MiB) == sha(source, 32 * MiB)
    assert (cold["sessions_opened"], cold["sessions_reused"]) == (4, 0)
    assert (hot["sessions_opened"], hot["sessions_reused"]) == (0, 4)
    assert warm["taken"] == 4 and warm["idle"] == 4
    assert (tmp_path / "target.log").read_text().count("login: ") == 4  # for both copies


def test_pause_then_resume_of_a_large_copy_finishes_with_the_right_hash(
    tmp_path: Path, remote: tuple[ReservoirTarget, Path]
) -> None:
    target, lun = remote
    source = random_file(tmp_path / "src.img", 128 * MiB)
    with holding_agent(tmp_path, 8 * MiB) as url, client(url) as c:
        copy_id = start_copy(c, source, target.url(0), streams=1, extent_size=MiB)["id"]
        wait_done_bytes(c, copy_id, 8 * MiB)  # and held there until paused
        paused = c.post(f"/copies/{copy_id}/pause")
        assert paused.status_code == 200 and paused.json()["state"] == "paused"
        again = c.post(f"/copies/{copy_id}/pause")
        assert again.status_code == 409
        assert "cannot pause" in again.json()["detail"] and "paused" in again.json()["detail"]
        assert c.post(f"/copies/{copy_id}/resume").status_code == 200
        done = wait_for(c, copy_id, "completed", "failed")
    assert done["state"] == "completed", done["last_error"]
    assert done["runs"] == 2 and done["summary"]["skipped_bytes"] >= 8 * MiB
    assert sha(lun, 128 * MiB) == sha(source, 128 * MiB)


def test_a_restarted_agent_lists_and_resumes_an_interrupted_copy(
    tmp_path: Path, remote: tuple[ReservoirTarget, Path]
) -> None:
    target, lun = remote
    source = random_file(tmp_path / "src.img", 128 * MiB)
    settings = settings_for(tmp_path)
    held = gated_copy([WriteGate(8 * MiB)])  # held after 8 MiB until the agent stops
    with serve_in_thread(settings, held) as url, client(url) as c:
        copy_id = start_copy(c, source, target.url(0), streams=1, extent_size=MiB)["id"]
        wait_done_bytes(c, copy_id, 8 * MiB)
    with serve_in_thread(settings) as url, client(url) as c:
        before = c.get(f"/copies/{copy_id}").json()
        assert before["state"] == "paused"
        assert c.post(f"/copies/{copy_id}/resume").status_code == 200
        done = wait_for(c, copy_id, "completed", "failed")
    assert done["state"] == "completed", done["last_error"]
    assert done["summary"]["skipped_bytes"] >= 8 * MiB
    assert sha(lun, 128 * MiB) == sha(source, 128 * MiB)


def test_cancel_stops_a_copy_and_cannot_be_undone(
    tmp_path: Path, remote: tuple[ReservoirTarget, Path]
) -> None:
    target, _ = remote
    source = random_file(tmp_path / "src.img", 128 * MiB)
    with holding_agent(tmp_path, MiB) as url, client(url) as c:
        copy_id = start_copy(c, source, target.url(0), streams=1, extent_size=MiB)["id"]
        wait_done_bytes(c, copy_id, MiB)
        r = c.post(f"/copies/{copy_id}/cancel")
        assert r.status_code == 200 and r.json()["state"] == "cancelled"
        for verb in ("resume", "pause", "cancel"):
            refused = c.post(f"/copies/{copy_id}/{verb}")
            assert refused.status_code == 409
            assert "it is cancelled" in refused.json()["detail"]


def empty_to_out(tmp_path: Path) -> tuple[Path, str]:
    """A copy the engine refuses once it runs (its source is empty), between volumes."""
    (tmp_path / "empty.img").touch()
    blank(tmp_path / "out.img", MiB)
    return tmp_path / "empty.img", str(tmp_path / "out.img")


def test_a_copy_the_engine_refuses_is_failed_not_500(tmp_path: Path, api: str) -> None:
    with client(api) as c:
        created = start_copy(c, *empty_to_out(tmp_path))
        done = wait_for(c, created["id"], "completed", "failed")
    assert done["state"] == "failed" and done["last_error"]


def test_caps_are_applied_to_the_running_streams(
    tmp_path: Path, remote: tuple[ReservoirTarget, Path]
) -> None:
    target, _ = remote
    source = random_file(tmp_path / "src.img", 128 * MiB)
    caps = {"stream_cwnd_caps": {"0": 200}, "stream_pacing_rates": {"0": 20_000_000}}
    with holding_agent(tmp_path, MiB) as url, client(url) as c:
        copy_id = start_copy(c, source, target.url(0), streams=1, extent_size=MiB)["id"]
        wait_done_bytes(c, copy_id, MiB)  # sessions up (a cancel while they open may be lost)
        r = c.put(f"/copies/{copy_id}/caps", json=caps)
        no_stream = c.put(f"/copies/{copy_id}/caps", json={"stream_pacing_rates": {"3": 10}})
        paused = c.post(f"/copies/{copy_id}/pause").json()
        shown = c.get(f"/copies/{copy_id}").json()
        info = c.get("/info").json()
        c.post(f"/copies/{copy_id}/cancel")
        after = c.put(f"/copies/{copy_id}/caps", json=caps)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["applied"] is True and "so-max-pacing-rate" in body["reason"], body
    assert body["requested"]["stream_cwnd_caps"] == {"0": 200}
    assert paused.get("state") == "paused", paused
    assert shown["caps"]["applied"] is False and "when the copy runs" in shown["caps"]["reason"]
    assert info["caps_requested"][copy_id] == shown["caps"]
    assert no_stream.status_code == 409 and "no stream 3" in no_stream.json()["detail"]
    assert after.status_code == 409 and "cannot set caps" in after.json()["detail"]


def test_caps_with_bad_values_are_422(tmp_path: Path, api: str) -> None:
    with client(api) as c:
        copy_id = start_copy(c, *empty_to_out(tmp_path))["id"]
        r = c.put(f"/copies/{copy_id}/caps", json={"stream_pacing_rates": {"x": 0}})
    assert r.status_code == 422


# ---------------------------------------------------------------- the builtin target


@pytest.fixture
def builtin(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    lun = blank(tmp_path / "builtin.img", 32 * MiB)
    port = free_port()
    config = tcfg.TargetConfig(
        portals=[("127.0.0.1", port)],
        targets=[tcfg.Target(iqn=IQN, luns=[tcfg.Lun(0, str(lun))], open=True)],
    )
    path = tmp_path / "target.toml"
    tcfg.save(config, path)
    with serve_in_thread(settings_for(tmp_path, path)) as url:
        yield url, f"iscsi://127.0.0.1:{port}/{IQN}/0", lun


def test_info_describes_the_host_and_the_builtin_target(builtin: tuple[str, str, Path]) -> None:
    url, _, lun = builtin
    with client(url) as c:
        info = c.get("/info").json()
    assert info["name"] == "agent-test" and info["version"]
    assert "threads" in info["storage_backends"]
    assert isinstance(info["mptcp"], bool)
    assert info["volumes"] == [
        {"target": IQN, "lun": 0, "path": str(lun), "size": 32 * MiB, "read_only": False}
    ]


def test_builtin_target_serves_a_lun_while_the_api_runs(
    tmp_path: Path, builtin: tuple[str, str, Path]
) -> None:
    url, lun_url, lun = builtin
    if shutil.which("iscsi-inq") is not None:
        out = subprocess.run(
            ["iscsi-inq", lun_url], capture_output=True, text=True, timeout=30, check=True
        )
        assert "Reservoir" in out.stdout or "Vendor" in out.stdout, out.stdout
    source = random_file(tmp_path / "src.img", 16 * MiB)
    with client(url) as c:
        copy_id = start_copy(c, source, lun_url, streams=2)["id"]
        done = wait_for(c, copy_id, "completed", "failed")
    assert done["state"] == "completed", done["last_error"]
    assert sha(lun, 16 * MiB) == sha(source, 16 * MiB)


# ---------------------------------------------------------------- the command


def test_agent_serve_command_runs_until_sigterm(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "agent.toml"
    config.write_text(
        f'[agent]\nname = "cli"\nlisten = "127.0.0.1:{port}"\ntokens = ["{TOKEN}"]\n'
        'state_dir = "state"\n'
    )
    code = "import sys; from reservoir.agent import agent_cli; sys.exit(agent_cli.main())"
    log = tmp_path / "agent.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "agent", "serve", "--config", str(config)],
            stdout=out,
            stderr=out,
        )
        try:
            wait_port("127.0.0.1", port, proc=proc)
            with client(f"http://127.0.0.1:{port}") as c:
                assert c.get("/info").json()["name"] == "cli"
        finally:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=30)
    text = log.read_text()
    assert rc in (0, -signal.SIGTERM), text  # uvicorn re-raises the signal once stopped
    assert "Application shutdown complete" in text and "agent cli: 0 copies" in text
    assert TOKEN not in text
    assert (tmp_path / "state" / "copies").is_dir()
