"""``reservoir copy`` over two lab links (hosts a and b, 200 Mbit/s, 5 ms one way each):
both paths carry bytes; a cut link fails over to the other; a restored link is used
again; MPTCP over both links.  Our target runs in host b, the copy in host a."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reservoir.lab.network import Lab
from reservoir.lab.peers import reservoir_command
from reservoir.lab.spec import Spec, parse

from .conftest import lab_of

pytestmark = pytest.mark.integration

IQN = "iqn.2026-11.org.reservoir:paths"
L1 = ("10.201.1.1", "10.201.1.2")
L2 = ("10.201.2.1", "10.201.2.2")
P1, P2 = f"{L1[0]}={L1[1]}:3260", f"{L2[0]}={L2[1]}:3260"


def two_links() -> Spec:
    def link(name: str, net: int) -> dict[str, Any]:
        return {
            "name": name,
            "a": "a",
            "b": "b",
            "a_addr": f"10.201.{net}.1/24",
            "b_addr": f"10.201.{net}.2/24",
            "rate_mbit": 200,
            "delay_ms": 5,
        }

    return parse({"host": [{"name": "a"}, {"name": "b"}], "link": [link("l1", 1), link("l2", 2)]})


@pytest.fixture
def lab() -> Iterator[Lab]:
    yield from lab_of(two_links())


class Setup:
    def __init__(self, lab: Lab, tmp: Path, size: int) -> None:
        self.lab, self.tmp, self.size = lab, tmp, size
        self.source = tmp / "source.img"
        self.source.write_bytes(os.urandom(size))
        self.lun = tmp / "lun.img"
        with open(self.lun, "wb") as f:
            f.truncate(size)
        self.telemetry = tmp / "telemetry.jsonl"
        self.log = tmp / "target.log"
        self.target: subprocess.Popen[bytes] | None = None

    def serve(self, *extra: str) -> None:
        argv = [*reservoir_command(), "target", "serve", "--iqn", IQN, "--lun", str(self.lun)]
        argv += ["--open"]
        argv += ["--portal", f"{L1[1]}:3260", "--portal", f"{L2[1]}:3260"]
        argv += ["--nop-interval", "0", *extra]
        with open(self.log, "wb") as log:
            self.target = self.lab.run("b", argv, stdout=log, stderr=log)
        deadline = time.monotonic() + 15
        while b"ready" not in self.log.read_bytes():
            assert self.target.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "target did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.target is not None:
            self.target.terminate()
            try:
                self.target.wait(10)
            except subprocess.TimeoutExpired:
                self.target.kill()
                self.target.wait()

    def copy(self, *extra: str) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "reservoir", "copy", str(self.source)]
        argv += [f"iscsi://{L1[1]}:3260/{IQN}/0", "--streams", "4", "--extent-size", str(4 << 20)]
        argv += ["--checkpoint", str(self.tmp / "ck.json"), "--telemetry", str(self.telemetry)]
        return self.lab.run(
            "a", [*argv, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def finish(self, proc: subprocess.Popen[str], timeout: float = 60) -> str:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err + out
        print(out)
        assert self.lun.read_bytes() == self.source.read_bytes()
        return out

    def wait_copying(self, proc: subprocess.Popen[str], done: int) -> None:
        """Waits until ``done`` bytes are copied (discovery and logins go over l1)."""
        deadline = time.monotonic() + 20
        while not any(r["bytes_done"] >= done for r in self.records("progress")):
            assert proc.poll() is None and time.monotonic() < deadline, "copy did not start"
            time.sleep(0.05)

    def records(self, kind: str) -> list[dict[str, Any]]:
        if not self.telemetry.exists():
            return []
        lines = self.telemetry.read_text().splitlines()
        return [r for r in map(json.loads, lines) if r["type"] == kind]

    def path_bytes(self, after: float = 0.0) -> dict[str, int]:
        sums: dict[str, int] = {}
        for r in self.records("stream"):
            if r["time"] >= after:
                sums[r["path"]] = sums.get(r["path"], 0) + (r["bytes"] or 0)
        return sums


@pytest.fixture
def setup(lab: Lab, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Setup]:
    s = Setup(lab, tmp_path, getattr(request, "param", 64 << 20))
    s.serve()
    try:
        yield s
    finally:
        s.stop()


def test_bind_over_both_links_uses_both(setup: Setup) -> None:
    started = time.monotonic()
    setup.finish(setup.copy("--bind", L1[0], "--bind", L2[0]))
    elapsed = time.monotonic() - started
    sums = setup.path_bytes()
    print(f"64 MiB over 2 x 200 Mbit/s in {elapsed:.1f} s; acked bytes per path {sums}")
    assert set(sums) == {P1, P2}
    assert all(b > 8 << 20 for b in sums.values())
    assert not setup.records("path")


@pytest.mark.parametrize("setup", [128 << 20], indirect=True)
def test_cut_link_fails_over(setup: Setup) -> None:
    proc = setup.copy("--bind", L1[0], "--bind", L2[0])
    setup.wait_copying(proc, 16 << 20)
    cut = time.time()
    setup.lab.link_down("l1")
    out = setup.finish(proc)
    states = [(r["path"], r["state"]) for r in setup.records("path")]
    assert (P1, "failed") in states and all(p == P1 for p, _ in states)
    assert f"path {P1}: failover window" in out
    window = out.split("failover window ")[1].split(" s")[0]
    after = setup.path_bytes(after=cut + 3)
    print(f"failover window {window} s; acked bytes per path after the cut {after}")
    assert after.get(P2, 0) > 16 << 20 and after.get(P1, 0) == 0


@pytest.mark.parametrize("setup", [192 << 20], indirect=True)
def test_restored_link_is_used_again(setup: Setup) -> None:
    proc = setup.copy("--bind", L1[0], "--bind", L2[0])
    setup.wait_copying(proc, 8 << 20)
    setup.lab.link_down("l1")
    time.sleep(3.0)
    restored = time.time()
    setup.lab.link_up("l1")
    setup.finish(proc, timeout=90)
    states = [r["state"] for r in setup.records("path") if r["path"] == P1]
    assert states[:2] == ["failed", "recovered"]
    after = setup.path_bytes(after=restored)
    print(f"path states of l1 {states}; acked bytes per path after restoring {after}")
    assert after.get(P1, 0) > 4 << 20


def tx_bytes(lab: Lab, dev: str) -> int:
    out = lab.exec("a", ["cat", f"/sys/class/net/{dev}/statistics/tx_bytes"]).stdout
    return int(out)


def test_mptcp_refused_then_over_two_links(setup: Setup) -> None:
    lab = setup.lab
    lab.exec("a", ["sysctl", "-q", "net.mptcp.enabled=0"])
    proc = setup.copy("--mptcp")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "the kernel refuses MPTCP sockets" in err, err + out
    lab.exec("a", ["sysctl", "-q", "net.mptcp.enabled=1"])
    for host in ("a", "b"):
        lab.exec(host, ["ip", "mptcp", "limits", "set", "subflow", "2", "add_addr_accepted", "2"])
    lab.exec("b", ["ip", "mptcp", "endpoint", "add", L2[1], "dev", "l2", "signal"])
    setup.stop()
    setup.serve("--mptcp")  # the target answers MP_CAPABLE and announces its l2 address
    before = {dev: tx_bytes(lab, dev) for dev in ("l1", "l2")}
    setup.finish(setup.copy("--mptcp"))
    sent = {dev: tx_bytes(lab, dev) - before[dev] for dev in ("l1", "l2")}
    print(f"--mptcp: bytes sent per link {sent}")
    # One URL, one address: MPTCP adds subflows over l2, so both links carry data.
    assert sent["l1"] + sent["l2"] > 64 << 20
    assert sent["l2"] > 8 << 20
    # and the streams' telemetry counts what every subflow carried, not the first's
    # alone: each stream's last cumulative count (the copy samples once more at its end)
    last: dict[str, int] = {}
    for r in setup.records("stream"):
        last[r["stream"]] = max(last.get(r["stream"], 0), r["bytes_acked"] or 0)
    print(f"--mptcp: bytes acknowledged in the streams' telemetry {sum(last.values())}")
    assert sum(last.values()) >= 0.95 * setup.size
