"""PacingPlan: rates from capacities, shares, weights and the margin; apply/remove; JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from reservoir.pacing.nic import Applied, PacingError
from reservoir.pacing.plan import DEFAULT_MARGIN, NicSpec, PacingPlan, StreamSpec

G = 1_000_000_000


def two_nic_plan(margin: float = DEFAULT_MARGIN) -> PacingPlan:
    return PacingPlan(
        nics=[NicSpec("eth1", 10 * G, share=0.5), NicSpec("eth2", 10 * G, share=0.5)],
        streams=[StreamSpec("s0", "eth1"), StreamSpec("s1", "eth1", 2), StreamSpec("s2", "eth2")],
        bottleneck_bps=10 * G,
        margin=margin,
    )


def test_nic_rates_are_their_share_of_the_bottleneck_under_the_margin() -> None:
    assert two_nic_plan().nic_rates() == {"eth1": 4_850_000_000, "eth2": 4_850_000_000}


def test_margin_is_configurable() -> None:
    assert two_nic_plan(margin=0.9).nic_rates()["eth1"] == 4_500_000_000


def test_stream_rates_split_the_nic_rate_by_weight() -> None:
    rates = two_nic_plan().stream_rates()
    assert rates == {"s0": 1_616_666_667, "s1": 3_233_333_333, "s2": 4_850_000_000}
    assert rates["s0"] + rates["s1"] == pytest.approx(4_850_000_000, abs=1)


def test_share_above_the_nic_capacity_is_capped_at_the_capacity() -> None:
    plan = PacingPlan([NicSpec("eth1", 1 * G, share=0.5)], bottleneck_bps=10 * G)
    assert plan.nic_rates() == {"eth1": 970_000_000}


def test_nics_without_share_split_the_rest_by_capacity() -> None:
    plan = PacingPlan(
        [NicSpec("a", 10 * G, share=0.4), NicSpec("b", 10 * G), NicSpec("c", 5 * G)],
        bottleneck_bps=9 * G,
        margin=1.0,
    )
    assert plan.nic_rates() == {"a": 3_600_000_000, "b": 3_600_000_000, "c": 1_800_000_000}


def test_bottleneck_defaults_to_the_sum_of_capacities() -> None:
    plan = PacingPlan([NicSpec("a", 1 * G), NicSpec("b", 1 * G)])
    assert plan.nic_rates() == {"a": 970_000_000, "b": 970_000_000}


def test_explicit_rate_is_used_as_given() -> None:
    plan = PacingPlan([NicSpec("a", 1 * G, rate_bps=300e6), NicSpec("b", 1 * G)], bottleneck_bps=G)
    assert plan.nic_rates() == {"a": 300_000_000, "b": 679_000_000}


def test_same_name_in_two_namespaces_are_two_nics() -> None:
    plan = PacingPlan(
        [NicSpec("l1", G, netns="h1"), NicSpec("l1", G, netns="h2")],
        streams=[StreamSpec("x", "h1/l1"), StreamSpec("y", "h2/l1")],
    )
    assert plan.nic_rates() == {"h1/l1": 970_000_000, "h2/l1": 970_000_000}
    assert plan.stream_rates() == {"x": 970_000_000, "y": 970_000_000}


@pytest.mark.parametrize(
    ("nics", "streams", "kw", "match"),
    [
        ([], [], {}, "at least one NIC"),
        ([NicSpec("a", G)], [], {"margin": 0.0}, "margin must be"),
        ([NicSpec("a", G)], [], {"margin": 1.1}, "margin must be"),
        ([NicSpec("a", 0)], [], {}, "capacity of NIC a"),
        ([NicSpec("a", G, share=1.5)], [], {}, "share must be in"),
        ([NicSpec("a", G, share=0.5, rate_bps=1e6)], [], {}, "not both"),
        ([NicSpec("a", G, rate_bps=2e9)], [], {}, "above its capacity"),
        ([NicSpec("a", G, share=0.7), NicSpec("b", G, share=0.6)], [], {}, "more than"),
        ([NicSpec("a", G), NicSpec("a", G)], [], {}, "NIC 'a' appears twice"),
        ([NicSpec("a", G)], [StreamSpec("s", "b")], {}, "no NIC 'b'"),
        ([NicSpec("a", G)], [StreamSpec("s", "a", 0)], {}, "weight of stream s"),
        ([NicSpec("a", G)], [StreamSpec("s", "a"), StreamSpec("s", "a")], {}, "'s' appears"),
        ([NicSpec("a", G)], [], {"bottleneck_bps": -1.0}, "bottleneck must be"),
    ],
)
def test_inconsistent_plans_are_refused(
    nics: list[NicSpec], streams: list[StreamSpec], kw: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        PacingPlan(nics, streams, **kw)


def test_json_round_trip_keeps_inputs_and_rates() -> None:
    plan = PacingPlan(
        [NicSpec("l1", G, share=0.25, netns="h1"), NicSpec("l2", G, rate_bps=1e8)],
        [StreamSpec("s0", "h1/l1", 1.5), StreamSpec("s1", "l2")],
        bottleneck_bps=2 * G,
        margin=0.95,
        kind="tbf",
    )
    text = plan.to_json()
    back = PacingPlan.from_json(text)
    assert back == plan
    assert json.loads(back.to_json()) == json.loads(text)
    assert '"nic_rates": {"h1/l1": 475000000, "l2": 100000000}' in text


# ------------------------------------------------------------------ apply / remove


def applied(ifname: str, netns: str | None, rate: int, kind: str) -> Applied:
    return Applied(ifname, netns, 1, kind, 0x52530000, rate, 1514, 0, "noqueue", 0, 1, None, "-")


@dataclass
class FakeBackend:
    """Records NIC pacing; fails on ``fail_on`` (an ifname) like a missing device."""

    fail_on: str | None = None
    active: list[tuple[str, int]] = field(default_factory=list)
    flows: dict[str, int] = field(default_factory=dict)

    def apply(
        self,
        ifname: str,
        rate_bps: int,
        netns: str | None = None,
        *,
        kind: str = "auto",
        flows: int = 1,
    ) -> Applied:
        if ifname == self.fail_on:
            raise PacingError(f"no network device {ifname}")
        self.active.append((ifname, rate_bps))
        self.flows[ifname] = flows
        return applied(ifname, netns, rate_bps, kind)

    def remove(self, a: Applied) -> bool:
        self.active.remove((a.ifname, a.rate_bps))
        return True


def test_apply_paces_every_nic_and_remove_undoes_it() -> None:
    plan, backend = two_nic_plan(), FakeBackend()
    plan.apply(backend)
    assert backend.active == [("eth1", 4_850_000_000), ("eth2", 4_850_000_000)]
    assert backend.flows == {"eth1": 2, "eth2": 1}  # the streams on each: fq's maxrate divides
    assert '"ifname": "eth1"' in plan.to_json()
    plan.remove(backend)
    assert backend.active == [] and plan.applied == []


def test_failed_apply_leaves_nothing_behind() -> None:
    plan, backend = two_nic_plan(), FakeBackend(fail_on="eth2")
    with pytest.raises(PacingError, match="eth2"):
        plan.apply(backend)
    assert backend.active == [] and plan.applied == []


def test_context_manager_removes_on_exception() -> None:
    backend = FakeBackend()
    plan = two_nic_plan()
    plan.backend = backend
    with pytest.raises(RuntimeError, match="boom"), plan:
        assert len(backend.active) == 2
        raise RuntimeError("boom")
    assert backend.active == []


def test_applying_twice_is_refused() -> None:
    plan, backend = two_nic_plan(), FakeBackend()
    plan.apply(backend)
    with pytest.raises(RuntimeError, match="already applied"):
        plan.apply(backend)
    plan.remove(backend)
