"""The ipg kind of per-NIC pacing: the line rate and gap it asks the module for,
and the rate read back from them; fq's per-flow maxrate for the flows of a NIC. The
kinds run in a guest in tests/vm/test_nic_pacing.py."""

from __future__ import annotations

import struct

import pytest

from reservoir.pacing import _tc, _tc_ipg, nic

MTU = 1500
FRAME = MTU + 14  # what tbf and the module count of a full frame


@pytest.mark.parametrize("rate_bps", [100_000_000, 500_000_000, 940_000_000])
def test_on_a_known_line_the_gap_brings_full_frames_to_the_plan(rate_bps: int) -> None:
    rate = rate_bps // 8
    line, gap = nic.ipg_setting(rate, MTU, 1_000_000_000)
    assert line == 125_000_000
    got = _tc.ipg_rate(line, gap, MTU)
    assert got <= rate  # never above the plan
    assert got >= _tc.ipg_rate(line, gap + 1, MTU)  # and the gap is the narrowest that does


def test_the_paper_s_knob_on_a_gigabit_line() -> None:
    # 100 Mbit/s of 1514-byte frames on 1 Gbit/s: each frame's slot is ten times its
    # own, so the gap is 9 frames and their overhead wide
    _, gap = nic.ipg_setting(12_500_000, MTU, 1_000_000_000)
    assert gap == 10 * FRAME - (FRAME + 24)


def test_without_a_known_line_the_rate_is_the_line_and_there_is_no_gap() -> None:
    line, gap = nic.ipg_setting(12_500_000, MTU, None)
    assert gap == 0
    assert _tc.ipg_rate(line, gap, MTU) == pytest.approx(12_500_000, abs=1)


def test_a_line_slower_than_the_plan_is_not_used() -> None:
    line, gap = nic.ipg_setting(125_000_000, MTU, 100_000_000)
    assert gap == 0 and line > 125_000_000


def test_auto_chooses_ipg_where_the_module_is_present(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nic, "ipg_available", lambda: True)
    assert nic.choose_kind("auto") == "ipg"


def test_a_state_file_from_before_the_ipg_kind_still_reads() -> None:
    old = {
        "ifname": "eth1", "netns": None, "ifindex": 3, "kind": "tbf", "handle": nic.HANDLE,
        "rate_bps": 8_000_000, "burst_bytes": 3000, "limit_bytes": 262144,
        "previous_kind": "noqueue", "previous_handle": 0, "owner_pid": 1,
        "owner_start": None, "state_file": "/run/reservoir-pacing/x",
    }  # fmt: skip
    applied = nic.Applied.from_dict(old)
    assert (applied.line_rate_bps, applied.gap) == (0, 0)


def test_fq_paces_each_of_the_streams_at_its_part_of_the_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # fq's maxrate caps each flow: for the NIC to keep its rate, each of its N flows
    # gets rate / N (a guest measured 2.2 times the plan without the division)
    asked: list[int] = []
    monkeypatch.setattr(_tc, "add_fq", lambda ipr, dev, handle, maxrate: asked.append(maxrate))
    plan = nic.Applied(
        ifname="eth1", netns=None, ifindex=3, kind="fq", handle=nic.HANDLE,
        rate_bps=400_000_000, burst_bytes=0, limit_bytes=0, previous_kind="noqueue",
        previous_handle=0, owner_pid=1, owner_start=None, state_file="-", flows=4,
    )  # fmt: skip
    nic._install(None, plan)
    assert asked == [12_500_000]  # bytes/s: 100 Mbit/s a flow, 400 together


@pytest.mark.parametrize("flows", [0, -1, 1.5, True])
def test_flows_must_be_a_positive_integer(flows: object) -> None:
    with pytest.raises(ValueError, match="flows"):
        nic.apply("eth1", 8_000_000, kind="tbf", flows=flows)  # type: ignore[arg-type]


def test_the_ipg_module_s_statistics_read_in_the_order_of_its_struct() -> None:
    raw = struct.pack("=4Q", 900, 12, 7, 3_500_000)  # struct tc_ipg_xstats
    decoded = _tc_ipg.stats(struct.pack("=HH", 4 + len(raw), 3) + raw)  # TCA_XSTATS
    decoded.decode()  # as pyroute2 reads it
    assert {k: decoded[k] for k in _tc_ipg.XSTATS_FIELDS} == {
        "delayed": 900, "segmented": 12, "late": 7, "late_ns": 3_500_000,
    }  # fmt: skip
