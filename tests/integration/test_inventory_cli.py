"""The inventory from the command line against a real coordinator and two real agents
on loopback: both agents registered from what they report, a volume set on each, a
link, and a transfer started and completed byte for byte; then an agent updated, and
what is in use refused removal while what is not is removed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reservoir.cli import main as reservoir
from reservoir.lab.peers import free_port
from reservoir.server import ServerSettings
from reservoir.server import make_server as make_coordinator

from .agents import RunningAgent, key_file, real_agent
from .servers import running

pytestmark = pytest.mark.integration

USER = "itest-user-token-0123456789abcdef"
MiB = 1 << 20
SIZE = 16 * MiB
Json = dict[str, Any]


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, RunningAgent, RunningAgent]]:
    settings = ServerSettings(
        database_url=f"sqlite:///{tmp_path / 'server.db'}",
        listen=f"127.0.0.1:{free_port()}",
        user_tokens=[USER],  # type: ignore[list-item]
        scheduler_interval=0.2,
        secret_key_file=key_file(tmp_path),
    )
    with (
        real_agent(tmp_path, "src-node", sources=1, size=SIZE) as a,
        real_agent(tmp_path, "dst-node", luns=1, size=SIZE) as b,
        running(make_coordinator(settings), "inventory-coordinator"),
    ):
        a.sources[0].write_bytes(bytes(range(256)) * (SIZE // 256))
        a.accept("src-node")
        b.accept("dst-node")
        yield f"http://127.0.0.1:{settings.port}", a, b


def cli(capsys: pytest.CaptureFixture[str], server: str, *argv: str) -> tuple[int, str, str]:
    """``reservoir COMMAND --server S --token T ARGS``, in this process."""
    command, *rest = argv
    rc = reservoir([command, *rest, "--server", server, "--token", USER])
    out, err = capsys.readouterr()
    with capsys.disabled():  # the session's transcript, with -s
        print(f"$ reservoir {' '.join(argv)}\n{out}{err}", end="")
    return rc, out, err


def test_two_agents_their_sets_and_a_link_from_the_cli_then_a_transfer(
    site: tuple[str, RunningAgent, RunningAgent], capsys: pytest.CaptureFixture[str]
) -> None:
    server, a, b = site
    rc, out, err = cli(capsys, server, "agent", "register", "src-node", "--url", a.url,
                       "--nic-speed", "10G", "--label", "site=tokyo")  # fmt: skip
    assert rc == 0, err
    assert "lo" in out and "src0.img" in out and "naa." in out
    rc, out, err = cli(capsys, server, "agent", "register", "dst-node", "--url", b.url)
    assert rc == 1 and "nic_speed_bps" in err  # lo's speed is not known: said, not guessed
    rc, out, err = cli(capsys, server, "agent", "register", "dst-node", "--url", b.url,
                       "--nic-speed", "10G")  # fmt: skip
    assert rc == 0 and "lun0" in out, err
    rc, out, _ = cli(capsys, server, "agent", "list")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["src-node", "dst-node"]
    assert cli(capsys, server, "volume-set", "create", "src", "--member", "src-node:src0.img",
               "--stripe-unit", "1MiB")[0] == 0  # fmt: skip
    assert cli(capsys, server, "volume-set", "create", "dst", "--member", "dst-node:lun0",
               "--stripe-unit", "1M")[0] == 0  # fmt: skip
    rc, out, err = cli(capsys, server, "link", "create", "lo-lo", "--a", "src-node:lo",
                       "--b", "dst-node:lo", "--capacity", "10G", "--rtt", "0.1")  # fmt: skip
    assert rc == 0, err
    rc, out, err = cli(capsys, server, "transfer", "--json", "start", "--from", "src",
                       "--to", "dst", "--path", "lo-lo", "--streams", "2")  # fmt: skip
    assert rc == 0, err
    tid = json.loads(out)["id"]
    deadline = time.monotonic() + 60
    while True:
        rc, out, _ = cli(capsys, server, "transfer", "--json", "status", tid)
        state = json.loads(out)["transfer"]["state"]
        if state == "completed" or time.monotonic() > deadline:
            break
        assert state not in ("failed", "cancelled"), out
        time.sleep(0.5)
    assert state == "completed"
    assert b.luns[0].read_bytes() == a.sources[0].read_bytes()

    rc, out, err = cli(capsys, server, "agent", "update", "dst-node", "--nic", "lo=25G",
                       "--label", "site=osaka")  # fmt: skip
    assert rc == 0 and "25 Gbit/s" in out and "site=osaka" in out, err
    rc, out, _ = cli(capsys, server, "agent", "list", "--label", "site=tokyo")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["src-node"]
    rc, out, _ = cli(capsys, server, "agent", "update", "src-node", "--unlabel", "site")
    assert rc == 0 and "labels -" in out
    rc, _, err = cli(capsys, server, "agent", "remove", "dst-node")
    assert rc == 1 and "409" in err  # its volume set holds it
    rc, _, err = cli(capsys, server, "link", "remove", "lo-lo")
    assert rc == 1 and "409" in err  # a path of the transfer, kept in its history
    rc, _, err = cli(capsys, server, "link", "create", "spare", "--a", "src-node:lo",
                     "--b", "dst-node:lo", "--capacity", "1G", "--rtt", "50")  # fmt: skip
    assert rc == 0, err
    assert cli(capsys, server, "link", "remove", "spare")[0] == 0
    rc, out, _ = cli(capsys, server, "link", "list")
    assert "spare" not in out and "lo-lo" in out
