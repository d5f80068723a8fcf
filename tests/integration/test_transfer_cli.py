"""``reservoir transfer`` against a real coordinator: uvicorn in a thread over a temporary
SQLite file, agents, volume sets and links registered through the API with httpx.

The agents are one real agent (its source files) registered under four names, and
the app gets the scheduler that only records transfers (``NoopScheduler``, which
leaves them queued); the tests assert what the API reports. A queued transfer holds
its destination, so each test's transfers are cancelled after it.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from reservoir.cli import build_parser
from reservoir.lab.peers import free_port
from reservoir.server import NoopScheduler, ServerSettings, create_app
from reservoir.server.clients import transfer_cli as tc

from .agents import RunningAgent, key_file, real_agent
from .servers import running

pytestmark = pytest.mark.integration

USER = "cli-itest-user-token-0123456789abcdef"
WRONG = "cli-itest-wrong-token-0123456789abcdef"
MiB = 1 << 20
Json = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def serve_in_thread(settings: ServerSettings) -> Iterator[str]:
    """The coordinator in a uvicorn server of its own thread; stopped with ``should_exit``."""
    app = create_app(settings, scheduler=NoopScheduler())
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, lifespan="on", access_log=False
    )
    with running(uvicorn.Server(config), "transfer-cli-api"):
        yield f"http://{settings.host}:{settings.port}"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = tmp_path_factory.mktemp("coordinator") / "server.db"
    settings = ServerSettings(
        database_url=f"sqlite:///{db}",
        listen=f"127.0.0.1:{free_port()}",
        user_tokens=[USER],  # type: ignore[list-item]  # pydantic makes it a SecretStr
        secret_key_file=key_file(db.parent),
    )
    with serve_in_thread(settings) as url:
        yield url


def created(r: httpx.Response) -> Json:
    assert r.status_code == 201, r.text
    data: Json = r.json()
    return data


@pytest.fixture(scope="module")
def disks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    with real_agent(tmp_path_factory.mktemp("disks"), "disks", sources=4) as agent:
        yield agent


@pytest.fixture(scope="module")
def sites(api: str, disks: RunningAgent) -> Json:
    """Two source agents and two destination agents, a volume set each side, two links."""
    with httpx.Client(base_url=f"{api}/api/v1", headers={"Authorization": f"Bearer {USER}"}) as c:
        agents: dict[str, Json] = {}
        body: Json
        for name in ("a0", "a1", "b0", "b1"):
            disks.accept(name)
            body = {
                "name": name,
                "control_url": disks.url,
                "nics": [{"name": "eth1", "address": "10.0.0.1", "speed_bps": 10**10}],
                "volumes": [disks.next_source("vol0", 64 * MiB)],
            }
            agents[name] = created(c.post("/agents", json=body))
        sets: dict[str, Json] = {}
        for side in ("a", "b"):
            members = [{"agent_id": agents[f"{side}{i}"]["id"], "volume": "vol0"} for i in (0, 1)]
            body = {"name": f"site-{side}", "members": members, "stripe_unit": MiB}
            sets[side] = created(c.post("/volume-sets", json=body))
        links = []
        for i in (0, 1):
            body = {
                "name": f"lfn{i}",
                "agent_a": agents[f"a{i}"]["id"],
                "nic_a": "eth1",
                "agent_b": agents[f"b{i}"]["id"],
                "nic_b": "eth1",
                "capacity_bps": 10**10,
                "rtt_ms": 100.0,
            }
            links.append(created(c.post("/links", json=body)))
    return {"sets": sets, "links": links}


@pytest.fixture(autouse=True)
def free_destination(api: str) -> Iterator[None]:
    """Cancels what a test left unfinished: the next one starts into site-b again."""
    yield
    headers = {"Authorization": f"Bearer {USER}"}
    with httpx.Client(base_url=f"{api}/api/v1", headers=headers) as c:
        for t in c.get("/transfers").json():
            if t["state"] not in ("completed", "cancelled"):
                assert c.post(f"/transfers/{t['id']}/cancel").status_code == 200


def cli(api: str, *argv: str, token: str = USER) -> tuple[int, str, str]:
    """The CLI in this process, as ``reservoir transfer --server API --token T ARGV``."""
    args = build_parser().parse_args(["transfer", "--server", api, "--token", token, *argv])
    out, err = io.StringIO(), io.StringIO()
    rc = tc.main(args, out, err)
    return rc, out.getvalue(), err.getvalue()


def api_state(api: str, transfer_id: str) -> str:
    r = httpx.get(
        f"{api}/api/v1/transfers/{transfer_id}", headers={"Authorization": f"Bearer {USER}"}
    )
    state: str = r.json()["state"]
    return state


def start(api: str, *extra: str) -> str:
    rc, out, err = cli(api, "--json", "start", "--from", "site-a", "--to", "site-b", *extra)
    assert rc == 0, err
    transfer_id: str = json.loads(out)["id"]
    return transfer_id


def test_start_prints_the_id_and_one_leg_per_server_pair(api: str, sites: Json) -> None:
    rc, out, err = cli(
        api, "start", "--from", "site-a", "--to", sites["sets"]["b"]["id"],
        "--streams", "4", "--path", "lfn0", "--path", "lfn1", "--pacing", "per-socket",
    )  # fmt: skip
    assert (rc, err) == (0, "")
    first, header, *legs = out.splitlines()
    transfer_id = first.split()[1]
    assert first == f"transfer {transfer_id} {api_state(api, transfer_id)}: 2 legs, 128.0 MiB"
    assert header.split()[:4] == ["LEG", "SOURCE", "DESTINATION", "BYTES"]
    assert [leg.split()[:4] for leg in legs] == [
        ["0", "a0:vol0", "b0:vol0", "64.0"],
        ["1", "a1:vol0", "b1:vol0", "64.0"],
    ]
    assert [leg.split()[-4:] for leg in legs] == [  # verification: once completed
        ["4", "lfn0", "queued", "-"],
        ["4", "lfn1", "queued", "-"],
    ]


def test_list_shows_the_transfer_with_its_state_and_verification(api: str, sites: Json) -> None:
    transfer_id = start(api, "--verify", "receipt")
    rc, out, _ = cli(api, "list")
    assert rc == 0 and out.splitlines()[0].split()[:5] == [
        "ID",
        "STATE",
        "PROGRESS",
        "RATE",
        "ETA",
    ]
    row = next(line.split() for line in out.splitlines() if line.startswith(transfer_id))
    assert row[1] == api_state(api, transfer_id) and row[3:6] == ["-", "-", "receipt"]


def test_status_shows_the_legs_and_the_events(api: str, sites: Json) -> None:
    transfer_id = start(api, "--no-equalizer", "--no-verify")
    rc, out, _ = cli(api, "status", transfer_id)
    assert rc == 0
    assert out.splitlines()[0] == f"transfer {transfer_id}: {api_state(api, transfer_id)}"
    assert "site-a -> site-b" in out and "equalizer off; verify off" in out
    assert any(line.split()[:3] == ["1", "a1:vol0", "b1:vol0"] for line in out.splitlines())
    assert "(new) -> queued" in out


def test_pause_resume_and_cancel_change_the_state(api: str, sites: Json) -> None:
    transfer_id = start(api)
    for action in ("pause", "resume", "cancel"):
        rc, out, err = cli(api, action, transfer_id)
        assert (rc, err) == (0, "")
        assert out == f"transfer {transfer_id}: {api_state(api, transfer_id)}\n"
    assert api_state(api, transfer_id) == "cancelled"


def test_a_refused_action_exits_1_with_the_apis_message(api: str, sites: Json) -> None:
    transfer_id = start(api)
    assert cli(api, "cancel", transfer_id)[0] == 0
    rc, out, err = cli(api, "pause", transfer_id)
    assert (rc, out) == (1, "")
    assert err.startswith("reservoir transfer pause: HTTP 409 Conflict: ")
    assert "cannot pause a transfer that is cancelled" in err and err.count("\n") == 1


def test_watch_of_a_cancelled_transfer_exits_1(api: str, sites: Json) -> None:
    transfer_id = start(api)
    cli(api, "cancel", transfer_id)
    rc, out, _ = cli(api, "watch", transfer_id, "--interval", "0.05")
    assert rc == 1 and out.splitlines()[-1].endswith("legs 0/2 up  cancelled")


def test_an_unknown_transfer_exits_1_with_404(api: str, sites: Json) -> None:
    rc, _, err = cli(api, "status", "no-such-transfer")
    assert rc == 1 and err == (
        "reservoir transfer status: HTTP 404 Not Found: no transfer 'no-such-transfer'\n"
    )


def test_an_unknown_volume_set_exits_1_with_a_clear_message(api: str, sites: Json) -> None:
    rc, out, err = cli(api, "start", "--from", "site-x", "--to", "site-b")
    assert (rc, out) == (1, "")
    assert err == (
        "reservoir transfer start: no volume set named 'site-x' (or with that id) "
        "on the coordinator\n"
    )


def test_a_wrong_token_exits_1_and_says_401(api: str) -> None:
    """The installed entry point, with the token from the environment, never printed."""
    env = {**os.environ, tc.ENV_SERVER: api, tc.ENV_TOKEN: WRONG}
    proc = subprocess.run(
        [sys.executable, "-m", "reservoir", "transfer", "list"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == "reservoir transfer list: HTTP 401 Unauthorized: the token is not valid\n"
    assert WRONG not in proc.stderr


def test_an_unreachable_coordinator_exits_1(api: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    rc, _, err = cli(url, "list")
    assert rc == 1
    assert (
        err
        == f"reservoir transfer list: cannot reach the coordinator at {url} (connection refused)\n"
    )


def test_labels_given_at_start_select_the_transfer_in_the_list(api: str, sites: Json) -> None:
    labelled = start(api, "--label", "team=disk", "--label", "ticket=RS-1")
    assert cli(api, "cancel", labelled)[0] == 0
    other = start(api)
    rc, out, err = cli(api, "--json", "list", "--label", "team=disk")
    assert rc == 0, err
    assert [t["id"] for t in json.loads(out)] == [labelled]
    assert json.loads(out)[0]["labels"] == {"team": "disk", "ticket": "RS-1"}
    rc, out, _ = cli(api, "--json", "list", "--state", "queued", "--state", "running")
    listed = [t["id"] for t in json.loads(out)]
    assert other in listed and labelled not in listed
    rc, _, err = cli(api, "start", "--from", "site-a", "--to", "site-b", "--label", "team")
    assert rc == 2 and "KEY=VALUE" in err
