"""Per-NIC pacing on a real veth between two lab namespaces, measured with iperf3.

Rates are compared on the TCP-payload scale: the qdisc counts whole Ethernet
frames (1514 bytes at MTU 1500: 14 header + 20 IPv4 + 32 TCP with timestamps +
1448 payload), so ``payload = rate * 1448 / 1514`` (conftest ``goodput_mbit``).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.lab import netns
from reservoir.lab.network import Lab
from reservoir.pacing import nic
from reservoir.pacing.plan import NicSpec, PacingPlan

from .conftest import goodput_mbit, iperf_mbit, lab_of, one_link_spec

pytestmark = pytest.mark.integration

B = "10.201.1.2"
DEV = "l1"


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    yield from lab_of(one_link_spec())  # no rate limit: the veths' root is noqueue


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "reservoir-pacing"


def dead_pid() -> int:
    """The PID of a process that has exited (and was reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("mbit", [200, 500])
def test_tbf_pacing_reaches_configured_rate_within_3_percent(
    lab: Lab, state_dir: Path, mbit: int
) -> None:
    applied = nic.apply(DEV, mbit * 1_000_000, lab.ns("a"), kind="tbf", state_dir=state_dir)
    try:
        # The paced rate is a ceiling: a busy machine can only lower what one run gets
        # (one CI run measured 185 of 191 Mbit/s), so the better of two runs is compared.
        measured = max(iperf_mbit(lab, "a", "b", B, 4) for _ in range(2))
    finally:
        nic.remove(applied)
    expected = goodput_mbit(mbit)
    print(f"paced {mbit} Mbit/s: {measured:.1f} Mbit/s of TCP payload, expected {expected:.1f}")
    assert abs(measured - expected) / expected < 0.03


def test_current_reads_back_kind_and_rate(lab: Lab, state_dir: Path) -> None:
    for kind in ("tbf", "htb"):
        applied = nic.apply(DEV, 123_456_000, lab.ns("a"), kind=kind, state_dir=state_dir)
        try:
            assert nic.current(DEV, lab.ns("a")) == nic.Qdisc(kind, nic.HANDLE, 123_456_000)
        finally:
            nic.remove(applied)


def test_remove_restores_the_original_root_qdisc(lab: Lab, state_dir: Path) -> None:
    before = nic.current(DEV, lab.ns("a"))
    applied = nic.apply(DEV, 100_000_000, lab.ns("a"), state_dir=state_dir)
    assert (applied.previous_kind, applied.previous_handle) == (before.kind, before.handle)
    state = json.loads(Path(applied.state_file).read_text())
    assert state["kind"] == "tbf" and state["previous_kind"] == "noqueue"
    assert Path(applied.state_file).stat().st_mode & 0o777 == 0o600
    assert nic.remove(applied)
    assert nic.current(DEV, lab.ns("a")) == before == nic.Qdisc("noqueue", 0, None)
    assert not Path(applied.state_file).exists()


def test_cleanup_stale_removes_dead_owners_only(lab: Lab, state_dir: Path) -> None:
    live = nic.apply(DEV, 100_000_000, lab.ns("a"), state_dir=state_dir)
    crashed = nic.apply(DEV, 100_000_000, lab.ns("b"), state_dir=state_dir)
    try:
        left = {**crashed.to_dict(), "owner_pid": dead_pid()}
        Path(crashed.state_file).write_text(json.dumps(left))
        cleaned = nic.cleanup_stale(state_dir)
        assert [c.netns for c in cleaned] == [lab.ns("b")]
        assert nic.current(DEV, lab.ns("b")).kind == "noqueue"
        assert not Path(crashed.state_file).exists()
        assert nic.current(DEV, lab.ns("a")).kind == "tbf"
        assert Path(live.state_file).exists()
    finally:
        nic.remove(live)
        nic.remove(crashed)


def test_apply_on_missing_device_raises(lab: Lab, state_dir: Path) -> None:
    with pytest.raises(nic.DeviceNotFoundError, match="no network device nosuch0 in namespace"):
        nic.apply("nosuch0", 100_000_000, lab.ns("a"), state_dir=state_dir)
    with pytest.raises(nic.DeviceNotFoundError, match="namespace 'rsv-no-such-ns' does not exist"):
        nic.apply(DEV, 100_000_000, "rsv-no-such-ns", state_dir=state_dir)
    assert not state_dir.exists() or not list(state_dir.iterdir())


def test_apply_leaves_a_foreign_root_qdisc_alone(lab: Lab, state_dir: Path) -> None:
    tbf = ["tbf", "rate", "300mbit", "burst", "20000", "limit", "100000"]
    netns.ns_run(lab.ns("b"), ["tc", "qdisc", "add", "dev", DEV, "root", "handle", "7:", *tbf])
    try:
        with pytest.raises(nic.QdiscBusyError, match="installed by someone else"):
            nic.apply(DEV, 100_000_000, lab.ns("b"), state_dir=state_dir)
        assert nic.current(DEV, lab.ns("b")) == nic.Qdisc("tbf", 0x70000, 300_000_000)
    finally:
        netns.ns_run(lab.ns("b"), ["tc", "qdisc", "del", "dev", DEV, "root"])


def test_second_apply_on_a_paced_device_is_refused(lab: Lab, state_dir: Path) -> None:
    applied = nic.apply(DEV, 100_000_000, lab.ns("a"), state_dir=state_dir)
    try:
        with pytest.raises(nic.QdiscBusyError, match="already paced by PID"):
            nic.apply(DEV, 200_000_000, lab.ns("a"), state_dir=state_dir)
    finally:
        nic.remove(applied)


def test_fq_probe_agrees_with_tc(lab: Lab) -> None:
    assert nic.fq_available(refresh=True) == netns.has_qdisc("fq")


def test_plan_context_paces_both_ends_and_leaves_nothing_on_exceptions(lab: Lab) -> None:
    a, b = lab.ns("a"), lab.ns("b")
    plan = PacingPlan(
        [NicSpec(DEV, 1e9, share=0.3, netns=a), NicSpec(DEV, 1e9, share=0.2, netns=b)],
        bottleneck_bps=1e9,
    )
    with pytest.raises(RuntimeError, match="boom"), plan:
        assert nic.current(DEV, a).rate_bps == 291_000_000
        assert nic.current(DEV, b).rate_bps == 194_000_000
        raise RuntimeError("boom")
    assert nic.current(DEV, a).kind == nic.current(DEV, b).kind == "noqueue"
    assert not any(Path(x.state_file).exists() for x in plan.applied)
