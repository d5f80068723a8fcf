"""``reservoir target serve --config FILE`` as a real process: a file that does not say
what it means is refused before anything listens."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from reservoir.lab.peers import LOCALHOST, free_port, reservoir_command, stop_process

pytestmark = pytest.mark.integration

IQN = "iqn.2026-11.org.reservoir:cfg"


def _target(lun: Path, target_keys: str = "open = true", lun_keys: str = "") -> str:
    return (
        f'[[target]]\niqn = "{IQN}"\n{target_keys}\n'
        f'[[target.lun]]\nid = 0\npath = "{lun}"\n{lun_keys}\n'
    )


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((LOCALHOST, port)) == 0


@pytest.mark.parametrize(
    ("case", "where"),
    [
        ("misspelt key", "target[0].lun[0].read_onyl"),
        ("misspelt table", "targets"),
        ("admits no one", IQN),
        ("string for a boolean", "target[0].lun[0].direct"),
    ],
)
def test_serve_refuses_a_bad_file_and_listens_nowhere(
    tmp_path: Path, case: str, where: str
) -> None:
    lun = tmp_path / "lun.img"
    lun.write_bytes(bytes(1 << 20))
    port = free_port()
    body = {
        "misspelt key": _target(lun, lun_keys="read_onyl = true"),
        "misspelt table": _target(lun).replace("[[target", "[[targets"),
        "admits no one": _target(lun, target_keys=""),
        "string for a boolean": _target(lun, lun_keys='direct = "false"'),
    }[case]
    config = tmp_path / "bad.toml"
    config.write_text(f'[server]\nportals = ["{LOCALHOST}:{port}"]\n{body}')
    proc = subprocess.Popen(
        [*reservoir_command(), "target", "serve", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        raw_out, raw_err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        listening = _listening(port)
        stop_process(proc)
        proc.communicate()
        pytest.fail(f"serve kept running (listening: {listening})")
    out, err = raw_out.decode(), raw_err.decode()
    assert proc.returncode != 0
    assert where in err and str(config) in err
    assert "ready" not in out
    assert not _listening(port)


@pytest.mark.parametrize("path", ["missing.img", "/dev/null"])
def test_serve_names_the_lun_it_cannot_open_and_listens_nowhere(tmp_path: Path, path: str) -> None:
    """A LUN whose backing is missing or not a volume: exit 2 with the target, the LUN
    and the path (it said ``[Errno 2] open failed: ...: '/srv/x'`` with no LUN)."""
    lun = tmp_path / path
    port = free_port()
    argv = [*reservoir_command(), "target", "serve", "--portal", f"{LOCALHOST}:{port}"]
    argv += ["--iqn", IQN, "--lun", str(lun), "--open"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2
    assert f"reservoir target serve: {IQN} LUN 0: {lun}: open failed: " in done.stderr
    assert "ready" not in done.stdout and not _listening(port)
