"""Campaign files: the shipped campaigns load, expand and fit their budget; the matrix
expands by its rules; every mistake is reported at once, each naming its field."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest

from reservoir import campaigns as campaign
from reservoir.campaigns import Campaign, CampaignFileError, Scenario, load, parse
from reservoir.campaigns import _estimate as model

QUICK_BUDGET_S = 17 * 60

GOOD: dict[str, Any] = {
    "name": "test",
    "description": "a test campaign",
    "repetitions": 2,
    "baseline": "iperf3",
    "topology": {
        "lab": "config/lab/lfn-2x500m-100ms.toml",
        "source": "src",
        "destination": "dst",
        "paths": ["l1", "l2"],
        "bottleneck_mbit": 1000,
    },
    "matrix": {
        "tool": ["iperf3", "reservoir"],
        "streams": [4, 16],
        "pacing": ["off", "per-nic"],
        "equalizer": [False, True],
        "multilink": ["paths", "mptcp"],
        "cc": ["bbr"],
        "duration_s": 30,
        "size": "4GiB",
    },
    "event": [
        {"at_s": 10, "action": "link-down", "link": "l1"},
        {"at_s": 20, "action": "link-up", "link": "l1"},
    ],
    "quick": {"streams": [16], "pacing": ["per-nic"], "repetitions": 1},
}

INLINE_LAB: dict[str, Any] = {
    "host": [{"name": "a"}, {"name": "b"}],
    "link": [
        {
            "name": "l1",
            "a": "a",
            "b": "b",
            "a_addr": "10.201.1.1/24",
            "b_addr": "10.201.1.2/24",
            "rate_mbit": 1000,
        }
    ],
}


def changed(**sections: dict[str, Any] | Any) -> dict[str, Any]:
    """GOOD with some keys of its sections changed (a dict value updates the section,
    None removes the key, anything else replaces it)."""
    data = copy.deepcopy(GOOD)
    for key, change in sections.items():
        if change is None:
            data.pop(key, None)
        elif isinstance(change, dict) and isinstance(data.get(key), dict):
            for k, v in change.items():
                if v is None:
                    data[key].pop(k, None)
                else:
                    data[key][k] = v
        else:
            data[key] = change
    return data


def errors_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(CampaignFileError) as info:
        parse(data)
    return str(info.value).splitlines()


def by_name(scenarios: tuple[Scenario, ...]) -> dict[str, Scenario]:
    return {s.name: s for s in scenarios}


# ------------------------------------------------------------------ shipped campaigns

SHIPPED = {p.stem: p for p in campaign.shipped()}

# name: (scenarios, of which iperf3, quick scenarios)
COUNTS = {
    "loopback": (35, 7, 15),
    "lfn-2x500m-100ms": (40, 8, 4),
    "lfn-1g-200ms": (15, 3, 5),
    "sc2003-scaled": (30, 6, 2),
    "lossy": (24, 12, 4),
    "failover": (3, 1, 2),
}
# the campaigns whose reservoir scenarios meet gridftp and xrdcp, and in their quick
# subsets too (make bench)
WITH_PEERS = {"loopback": True, "lfn-2x500m-100ms": True, "lfn-1g-200ms": True,
              "sc2003-scaled": False}  # fmt: skip


def test_the_shipped_campaigns_are_those_of_the_issue() -> None:
    assert set(SHIPPED) == set(COUNTS)


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_shipped_campaign_loads_and_expands_to_its_count(name: str) -> None:
    c = load(SHIPPED[name])
    scenarios = c.scenarios()
    total, iperf3, quick = COUNTS[name]
    assert (len(scenarios), sum(s.tool == "iperf3" for s in scenarios)) == (total, iperf3)
    assert len(c.quick()) == quick
    assert len({s.name for s in scenarios}) == total


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_shipped_quick_subset_is_part_of_the_campaign_and_under_15_minutes(name: str) -> None:
    c = load(SHIPPED[name])
    quick = c.quick()
    assert quick
    assert set(quick) <= set(c.scenarios())
    assert c.estimate_seconds(quick=True) < QUICK_BUDGET_S


def test_all_quick_subsets_together_fit_in_17_minutes() -> None:
    total = sum(load(p).estimate_seconds(quick=True) for p in SHIPPED.values())
    assert total < QUICK_BUDGET_S


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_shipped_reservoir_scenarios_have_an_iperf3_baseline_in_the_same_set(name: str) -> None:
    c = load(SHIPPED[name])
    for subset in (c.scenarios(), c.quick()):
        for s in subset:
            if s.tool == "reservoir":
                base = c.baseline_for(s, subset)
                assert base is not None and base.tool == "iperf3"
                assert (base.streams, base.pacing, base.cc, base.loss) == (
                    s.streams, s.pacing, s.cc, s.loss,
                )  # fmt: skip


@pytest.mark.parametrize("name", sorted(WITH_PEERS))
def test_shipped_reservoir_scenarios_meet_gridftp_and_xrdcp_of_the_same_streams(
    name: str,
) -> None:
    c = load(SHIPPED[name])
    subsets = [c.scenarios(), c.quick()] if WITH_PEERS[name] else [c.scenarios()]
    for subset in subsets:
        peers = {(s.tool, s.streams, s.cc, s.loss) for s in subset}
        for s in subset:
            if s.tool == "reservoir":
                for tool in ("gridftp", "xrdcp"):
                    assert (tool, s.streams, s.cc, s.loss) in peers, (s.name, tool)


def test_lfn_1g_200ms_is_the_path_design_section_5_measured_the_peers_on() -> None:
    c = load(SHIPPED["lfn-1g-200ms"])
    assert c.topology.lab is not None and c.topology.paths == ("l1",)
    link = c.topology.lab.link("l1")
    assert (link.rate_mbit, 2 * link.delay_ms, link.loss) == (1000, 200, 0)
    assert {s.streams for s in c.scenarios()} == {8, 16, 32}
    assert {s.size_bytes for s in c.scenarios() if s.tool != "iperf3"} == {2 << 30}
    assert {s.tool for s in c.quick()} == {"iperf3", "reservoir", "gridftp", "xrdcp"}
    # reservoir verified both ways in make bench: the storage read-back's cost shows
    assert {s.verify for s in c.quick() if s.tool == "reservoir"} == {"storage", "receipt"}


def test_lfn_campaign_multiplies_pacing_and_equalizer_for_reservoir_only() -> None:
    c = load(SHIPPED["lfn-2x500m-100ms"])
    names = by_name(c.scenarios())
    assert "reservoir-s16-pacing_per-nic-eq_on-paths-bbr-4GiB" in names
    assert "iperf3-s32-pacing_off-paths-bbr-30s" in names
    assert {s.streams for s in names.values()} == {4, 8, 16, 32}


def test_sc2003_lab_keeps_the_capacity_ratio_and_the_rtt() -> None:
    c = load(SHIPPED["sc2003-scaled"])
    assert c.topology.lab is not None
    rates = [c.topology.lab.link(p).rate_mbit for p in c.topology.paths]
    assert sum(rates) == pytest.approx(1000, rel=0.05)
    assert rates[0] / rates[2] == pytest.approx(4.8, rel=0.01)
    assert rates[1] / rates[2] == pytest.approx(2.4, rel=0.01)
    assert c.topology.rtt_ms == pytest.approx(350, rel=0.01)


def test_lossy_campaign_builds_its_lab_with_each_scenario_loss_on_the_link() -> None:
    c = load(SHIPPED["lossy"])
    assert {s.loss for s in c.scenarios()} == {0, 1e-4, 1e-3}
    for s in c.scenarios():
        spec = c.lab_spec(s)
        assert spec is not None and spec.link("l1").loss == s.loss
    losses = [s.loss or 0.0 for s in c.scenarios()]
    assert losses == sorted(losses)  # one lab per loss value, in turn


def test_failover_campaign_cuts_and_restores_l1_in_every_run() -> None:
    c = load(SHIPPED["failover"])
    for s in c.scenarios():
        assert [(e.at_s, e.action, e.link) for e in s.events] == [
            (20, "link-down", "l1"),
            (40, "link-up", "l1"),
        ]
    assert {s.multilink for s in c.scenarios() if s.tool == "reservoir"} == {"paths", "mptcp"}


def test_loopback_campaign_has_no_lab() -> None:
    c = load(SHIPPED["loopback"])
    assert c.topology.kind == "loopback"
    assert c.lab_spec(c.scenarios()[0]) is None
    assert {s.streams for s in c.scenarios()} == {1, 2, 4, 8, 16, 32, 64}


def test_loopback_campaign_and_its_quick_subset_compare_the_verification_modes() -> None:
    c = load(SHIPPED["loopback"])
    modes = [(s.streams, s.verify) for s in c.scenarios() if s.tool == "reservoir"]
    assert sorted(modes) == sorted((n, v) for n in (1, 2, 4, 8, 16, 32, 64)
                                   for v in ("storage", "receipt"))  # fmt: skip
    quick = [(s.streams, s.verify) for s in c.quick() if s.tool == "reservoir"]
    assert sorted(quick) == sorted((n, v) for n in (1, 8, 64) for v in ("storage", "receipt"))


# ------------------------------------------------------------------ expansion rules


def test_good_campaign_parses() -> None:
    c = parse(GOOD)
    assert isinstance(c, Campaign)
    assert (c.name, c.repetitions, c.baseline, c.quick_repetitions) == ("test", 2, "iperf3", 1)
    assert c.topology.kind == "lab" and c.topology.lab_file == "config/lab/lfn-2x500m-100ms.toml"


def test_iperf3_is_not_multiplied_by_equalizer_size_or_multilink() -> None:
    iperf3 = [s for s in parse(GOOD).scenarios() if s.tool == "iperf3"]
    assert len(iperf3) == 2 * 2  # streams x pacing
    assert {(s.equalizer, s.size_bytes, s.multilink, s.duration_s) for s in iperf3} == {
        (None, None, "paths", 30.0)
    }


def test_reservoir_is_multiplied_by_its_dimensions_but_not_duration() -> None:
    reservoir = [s for s in parse(GOOD).scenarios() if s.tool == "reservoir"]
    assert len(reservoir) == 2 * 2 * 2 * 2  # streams x pacing x equalizer x multilink
    assert {s.duration_s for s in reservoir} == {None}
    assert {s.size_bytes for s in reservoir} == {4 << 30}


def test_pacing_rate_is_multiplied_only_for_paced_scenarios() -> None:
    data = changed(matrix={"pacing_rate_mbit": [400, 475]})
    scenarios = parse(data).scenarios()
    assert {s.pacing_rate_mbit for s in scenarios if s.pacing == "off"} == {None}
    assert {s.pacing_rate_mbit for s in scenarios if s.pacing == "per-nic"} == {400, 475}
    off = [s for s in scenarios if s.pacing == "off"]
    paced = [s for s in scenarios if s.pacing == "per-nic"]
    assert len(paced) == 2 * len(off)
    assert "reservoir-s4-pacing_per-nic_475m-eq_on-mptcp-bbr-4GiB" in by_name(scenarios)
    assert scenarios[0].pacing_rate_bps is None
    assert paced[0].pacing_rate_bps == paced[0].pacing_rate_mbit * 1e6  # type: ignore[operator]


def test_exclude_removes_the_scenarios_matching_all_its_values() -> None:
    exclude = [{"tool": "reservoir", "multilink": "mptcp", "equalizer": False}, {"streams": 4}]
    scenarios = parse(changed(matrix={"exclude": exclude})).scenarios()
    assert all(s.streams == 16 for s in scenarios)
    assert not [s for s in scenarios if s.multilink == "mptcp" and s.equalizer is False]
    assert [s for s in scenarios if s.multilink == "mptcp" and s.equalizer is True]
    assert len(scenarios) == 2 + 2 * 3  # iperf3: pacing; reservoir: pacing x 3 (eq, ml) pairs


def test_exclude_by_size_takes_the_same_spelling_as_the_matrix() -> None:
    data = changed(matrix={"size": ["1GiB", "4GiB"], "exclude": [{"size": "4GiB"}]}, event=[])
    sizes = {s.size_bytes for s in parse(data).scenarios() if s.tool == "reservoir"}
    assert sizes == {1 << 30}


def test_names_are_readable_and_unique() -> None:
    names = [s.name for s in parse(GOOD).scenarios()]
    assert len(set(names)) == len(names)
    assert "reservoir-s16-pacing_per-nic-eq_on-paths-bbr-4GiB" in names
    assert "reservoir-s4-pacing_off-eq_off-mptcp-bbr-4GiB" in names
    assert "iperf3-s16-pacing_per-nic-paths-bbr-30s" in names


def test_names_are_stable_when_other_values_are_added_or_reordered() -> None:
    before = {s.name for s in parse(GOOD).scenarios()}
    more = changed(
        matrix={"streams": [16, 4, 8], "cc": ["cubic", "bbr"], "equalizer": [True, False]}
    )
    after = {s.name for s in parse(more).scenarios()}
    assert before < after


def test_verify_multiplies_reservoir_only_and_is_storage_by_default() -> None:
    data = changed(matrix={"verify": ["storage", "receipt"]})
    scenarios = parse(data).scenarios()
    reservoir = [s for s in scenarios if s.tool == "reservoir"]
    assert len(reservoir) == 2 * len([s for s in parse(GOOD).scenarios() if s.tool == "reservoir"])
    assert {s.verify for s in reservoir} == {"storage", "receipt"}
    assert {s.verify for s in scenarios if s.tool == "iperf3"} == {None}
    assert {s.verify for s in parse(GOOD).scenarios() if s.tool == "reservoir"} == {"storage"}


def test_verify_is_named_only_when_the_matrix_has_another_value_than_storage() -> None:
    assert not [s for s in parse(GOOD).scenarios() if "verify" in s.name]
    both = by_name(parse(changed(matrix={"verify": ["storage", "receipt"]})).scenarios())
    assert "reservoir-s4-pacing_off-eq_off-verify_receipt-mptcp-bbr-4GiB" in both
    assert "reservoir-s4-pacing_off-eq_off-verify_storage-mptcp-bbr-4GiB" in both
    assert "iperf3-s4-pacing_off-paths-bbr-30s" in both
    alone = parse(changed(matrix={"verify": "receipt"})).scenarios()
    assert all("verify_receipt" in s.name for s in alone if s.tool == "reservoir")


def test_a_quick_subset_of_storage_keeps_the_names_of_its_matrix() -> None:
    data = changed(matrix={"verify": ["storage", "receipt"]}, quick={"verify": "storage"})
    c = parse(data)
    reservoir = [s for s in c.quick() if s.tool == "reservoir"]
    assert reservoir and all(s.name.count("-verify_storage-") == 1 for s in reservoir)
    assert set(c.quick()) <= set(c.scenarios())


def test_exclude_by_verify_removes_those_copies() -> None:
    exclude = [{"verify": "receipt", "streams": 4}]
    data = changed(matrix={"verify": ["storage", "receipt"], "exclude": exclude})
    reservoir = [s for s in parse(data).scenarios() if s.tool == "reservoir"]
    assert {(s.streams, s.verify) for s in reservoir} == {
        (4, "storage"), (16, "storage"), (16, "receipt"),
    }  # fmt: skip


def test_loss_appears_in_the_name_and_orders_the_expansion() -> None:
    data = changed(matrix={"loss": [0, 2.5e-4, 1e-3]})
    scenarios = parse(data).scenarios()
    assert "iperf3-s4-pacing_off-paths-bbr-loss_2.5e-4-30s" in by_name(scenarios)
    assert "reservoir-s4-pacing_off-eq_off-paths-bbr-loss_0-4GiB" in by_name(scenarios)
    losses = [s.loss or 0.0 for s in scenarios]
    assert losses == sorted(losses)
    assert {s.loss for s in parse(GOOD).scenarios()} == {None}  # the spec's own loss


def test_scalar_values_and_defaults() -> None:
    matrix = {"tool": "reservoir", "streams": 8, "size": 1 << 30}
    c = parse({**changed(baseline=None, quick=None, event=[]), "matrix": matrix})
    (s,) = c.scenarios()
    assert (s.pacing, s.equalizer, s.multilink, s.cc, s.pacing_rate_mbit) == (
        "per-nic", True, "paths", "bbr", None,
    )  # fmt: skip
    assert c.quick() == ()


def test_quick_restricts_the_matrix_and_keeps_its_exclude() -> None:
    data = changed(matrix={"exclude": [{"tool": "reservoir", "equalizer": False}]})
    c = parse(data)
    assert {(s.streams, s.pacing) for s in c.quick()} == {(16, "per-nic")}
    assert {s.equalizer for s in c.quick() if s.tool == "reservoir"} == {True}
    assert len(c.quick()) == 1 + 2  # iperf3, reservoir x multilink


def test_baseline_for_finds_the_iperf3_scenario_with_the_same_settings() -> None:
    c = parse(GOOD)
    s = by_name(c.scenarios())["reservoir-s4-pacing_per-nic-eq_off-mptcp-bbr-4GiB"]
    base = c.baseline_for(s)
    assert base is not None and base.name == "iperf3-s4-pacing_per-nic-paths-bbr-30s"
    assert c.baseline_for(base) is None


# ------------------------------------------------------------------ gridftp and xrdcp

PEERS = {"tool": ["iperf3", "reservoir", "gridftp", "xrdcp"]}


def test_peers_copy_the_size_with_streams_pacing_and_cc_but_no_equalizer_or_mptcp() -> None:
    data = changed(matrix={**PEERS, "cc": ["bbr", "reno"]})
    for tool in ("gridftp", "xrdcp"):
        peers = [s for s in parse(data).scenarios() if s.tool == tool]
        assert len(peers) == 2 * 2 * 2  # streams x pacing x cc
        assert {(s.equalizer, s.multilink, s.duration_s, s.size_bytes) for s in peers} == {
            (None, "paths", None, 4 << 30)
        }
        assert f"{tool}-s16-pacing_per-nic-paths-reno-4GiB" in by_name(tuple(peers))


def test_peers_cannot_pace_a_socket_and_run_only_the_other_pacing_values() -> None:
    data = changed(matrix={**PEERS, "pacing": ["off", "per-socket"]}, quick=None)
    scenarios = parse(data).scenarios()
    assert {s.pacing for s in scenarios if s.tool == "gridftp"} == {"off"}
    assert {s.pacing for s in scenarios if s.tool == "reservoir"} == {"off", "per-socket"}


def test_peers_only_with_per_socket_pacing_are_refused() -> None:
    data = changed(matrix={**PEERS, "pacing": "per-socket"}, quick=None)
    lines = errors_of(data)
    for tool in ("gridftp", "xrdcp"):
        assert (
            f"matrix.pacing: {tool} cannot pace a socket (no option sets a socket's rate), and"
            " pacing is only per-socket; add off or per-nic"
        ) in lines


def test_peers_need_a_size() -> None:
    matrix = {"tool": ["iperf3", "gridftp"], "size": None}
    lines = errors_of(changed(matrix=matrix, quick=None, baseline=None))
    assert "matrix.size: missing (the length of gridftp runs)" in lines
    lines = errors_of(changed(matrix={**PEERS, "size": None}))
    assert "matrix.size: missing (the length of reservoir, gridftp and xrdcp runs)" in lines


def test_peers_are_refused_on_a_real_topology() -> None:
    real = {"links": ["tokyo-1"], "source_set": "vs-a", "destination_set": "vs-b"}
    topology = {"real": real, "lab": None, "paths": None}
    data = changed(topology=topology, event=[], quick=None, matrix=PEERS)
    assert (
        "matrix.tool: gridftp and xrdcp need a lab or loopback topology (the runner starts"
        " their servers in the destination's namespace); a real topology runs iperf3 and"
        " reservoir only"
    ) in errors_of(data)


def test_peers_need_an_iperf3_baseline_like_reservoir() -> None:
    data = changed(matrix={"tool": ["iperf3", "xrdcp"], "exclude": [{"tool": "iperf3"}]})
    assert any(
        line.startswith("baseline: needs both iperf3 and reservoir") for line in errors_of(data)
    )
    data = changed(matrix={**PEERS, "exclude": [{"tool": "iperf3", "streams": 4}]}, quick=None)
    assert any(
        line.startswith("baseline: reservoir-s4-") and "has no iperf3" in line
        for line in errors_of(data)
    )


def test_peer_runs_are_estimated_like_copies_with_a_shorter_setup() -> None:
    c = parse(changed(matrix=PEERS, event=[], quick=None))
    (peer,) = [s for s in c.scenarios() if s.name == "xrdcp-s4-pacing_off-paths-bbr-4GiB"]
    (res,) = [s for s in c.scenarios() if s.name == "reservoir-s4-pacing_off-eq_off-paths-bbr-4GiB"]
    copy = (4 << 30) * 8 / (1000 * model.GOODPUT * 1e6)
    assert model.run_seconds(peer, c.topology) == pytest.approx(copy + model.PEER_SETUP_S)
    assert model.run_seconds(res, c.topology) == pytest.approx(copy + model.RUN_SETUP_S)


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (changed(matrix={"streams": [4, 8, 0]}),
         "matrix.streams[2]: must be an integer between 1 and 256, got 0"),
        (changed(matrix={"streams": 300}),
         "matrix.streams: must be an integer between 1 and 256, got 300"),
        (changed(matrix={"streams": [4, 4]}), "matrix.streams[1]: 4 appears twice"),
        (changed(matrix={"streams": []}), "matrix.streams: must not be empty"),
        (changed(matrix={"tool": ["iperf3", "scp"]}),
         "matrix.tool[1]: must be one of iperf3, reservoir, gridftp, xrdcp, got 'scp'"),
        (changed(matrix={"pacing": ["fq"]}),
         "matrix.pacing[0]: must be one of off, per-nic, per-socket, got 'fq'"),
        (changed(matrix={"equalizer": ["on"]}), "matrix.equalizer[0]: must be true or false"),
        (changed(matrix={"multilink": "bond"}), "matrix.multilink: must be one of paths, mptcp"),
        (changed(matrix={"cc": ["vegas"]}), "matrix.cc[0]: must be one of bbr, cubic, reno"),
        (changed(matrix={"loss": [0, 0.9]}), "matrix.loss[1]: must be a number between 0 and 0.5"),
        (changed(matrix={"duration_s": 0}),
         "matrix.duration_s: must be a number greater than 0 and at most 86400, got 0"),
        (changed(matrix={"size": "4GB"}), 'matrix.size: must be a size in bytes or like "2GiB"'),
        (changed(matrix={"size": 1000}), "matrix.size: must be a size in bytes"),
        (changed(matrix={"pacing_rate_mbit": [-1]}),
         "matrix.pacing_rate_mbit[0]: must be a number greater than 0"),
        (changed(matrix={"pacing": "off", "pacing_rate_mbit": 400}),
         "matrix.pacing_rate_mbit: applies to paced scenarios, and pacing is only off"),
        (changed(matrix={"duration_s": None}), "matrix.duration_s: missing (the length of iperf3"),
        (changed(matrix={"size": None}), "matrix.size: missing (the length of reservoir runs)"),
        (changed(matrix={"tool": "reservoir"}, baseline=None, quick={"streams": [4]}),
         "matrix.duration_s: applies to iperf3 only, and matrix.tool has no iperf3"),
        (changed(matrix={"streams": None}), "matrix.streams: missing"),
        (changed(matrix={"exclude": [{"streams": 8}]}),
         "matrix.exclude[0].streams: 8 is not in matrix.streams (4, 16)"),
        (changed(matrix={"exclude": [{"tool": "iperf3", "equalizer": True}]}),
         "matrix.exclude[0]: matches no scenario"),
        (changed(matrix={"exclude": [{}]}), "matrix.exclude[0]: must name at least one dimension"),
        (changed(matrix={"exclude": {"streams": 4}}), "matrix.exclude: must be a list of tables"),
        (changed(matrix={"exclude": [{"streams": 4}, {"streams": 16}]}),
         "matrix: every scenario is excluded"),
        (changed(matrix="all"), "matrix: must be a table ([matrix])"),
        (changed(name="LFN test"), "name: must match"),
        (changed(description=""), "description: must be a non-empty string"),
        (changed(repetitions=0), "repetitions: must be an integer between 1 and 100, got 0"),
        (changed(baseline="netperf"), "baseline: must be one of iperf3, got 'netperf'"),
        (changed(matrix={"tool": "reservoir", "duration_s": None}, quick=None),
         "baseline: needs both iperf3 and reservoir in matrix.tool"),
        (changed(matrix={"exclude": [{"tool": "iperf3", "streams": 4}]}),
         "baseline: reservoir-s4-pacing_off-eq_off-paths-bbr-4GiB (and 7 more) has no iperf3"),
        (changed(matrix={"verify": ["storage", "read-back"]}),
         "matrix.verify[1]: must be one of storage, receipt, got 'read-back'"),
        (changed(quick={"verify": "receipt"}),
         "quick.verify: 'receipt' is not in matrix.verify ('storage')"),
        (changed(quick={"streams": [8]}), "quick.streams[0]: 8 is not in matrix.streams (4, 16)"),
        (changed(quick={"loss": 0}), "quick.loss: 0.0 is not in matrix.loss (not given)"),
        (changed(quick={"repetitions": 0}), "quick.repetitions: must be an integer between 1"),
        (changed(quick={"streams": [4], "pacing": "per-nic"},
                 matrix={"exclude": [{"streams": 4, "pacing": "per-nic"}]}),
         "quick: selects no scenario (after matrix.exclude)"),
        (changed(quick={"pacing": ["off"]},
                 matrix={"exclude": [{"tool": "iperf3", "pacing": "off"}]}),
         "quick: reservoir-s16-pacing_off-eq_off-paths-bbr-4GiB (and 3 more) has no iperf3"),
    ],
)  # fmt: skip
def test_matrix_and_campaign_errors_name_their_field(data: dict[str, Any], message: str) -> None:
    assert any(line.startswith(message) for line in errors_of(data)), errors_of(data)


@pytest.mark.parametrize(
    ("topology", "message"),
    [
        ({"paths": ["l1", "l9"]}, "topology.paths[1]: 'l9' is not a link of the lab (l1, l2)"),
        ({"source": "s"}, "topology.source: 's' is not a host of the lab (src, dst)"),
        ({"destination": "src"}, "topology.destination: must differ from the source"),
        ({"destination": None}, "topology.destination: must be a non-empty string, got None"),
        ({"bottleneck_mbit": 0}, "topology.bottleneck_mbit: must be a number greater than 0"),
        ({"bottleneck_mbit": 1200}, "topology.bottleneck_mbit: 1200 is more than the paths carry"),
        ({"lab": "/etc/lab.toml"}, "topology.lab: must be a spec file relative to the repository"),
        ({"lab": "config/../x.toml"}, "topology.lab: must be a spec file relative"),
        ({"lab": "config/lab/nope.toml"}, "topology.lab: "),
        ({"loopback": True}, "topology: give one of loopback = true, lab ="),
        ({"lab": None}, "topology: give one of"),
        ({"real": {"links": []}, "lab": None, "paths": None}, "topology.real.links: must not be"),
        ({"real": {"links": ["a"], "agents": 2}, "lab": None, "paths": None},
         "topology.real.agents: unknown field (expected destination_set, links, source_set)"),
        ({"real": {"links": ["a"], "source_set": "v", "destination_set": "v"}, "lab": None,
          "paths": None},
         "topology.real.destination_set: must differ from the source_set, both are 'v'"),
        ({"real": {"links": ["a"]}, "lab": None}, "topology.paths: not used with real"),
    ],
)  # fmt: skip
def test_topology_errors_name_their_field(topology: dict[str, Any], message: str) -> None:
    data = changed(topology=topology, event=[], quick=None, matrix={"multilink": "paths"})
    assert any(line.startswith(message) for line in errors_of(data)), errors_of(data)


def test_missing_lab_file_is_reported_with_its_path() -> None:
    lines = errors_of(changed(topology={"lab": "config/lab/nope.toml"}, event=[]))
    assert any("nope.toml: cannot read" in line for line in lines)


def test_inline_lab_is_parsed_by_the_lab_spec_parser() -> None:
    topology = {"lab": INLINE_LAB, "source": "a", "destination": "b", "paths": ["l1"]}
    data = changed(topology=topology, event=[], matrix={"multilink": "paths"})
    c = parse(data)
    assert c.topology.lab is not None and c.topology.lab_file is None
    assert c.topology.lab.link("l1").rate_mbit == 1000


def test_inline_lab_errors_are_prefixed_with_topology_lab() -> None:
    lab = copy.deepcopy(INLINE_LAB)
    lab["link"][0]["rate_mbit"] = -5
    topology = {"lab": lab, "source": "a", "destination": "b", "paths": ["l1"]}
    lines = errors_of(changed(topology=topology, event=[]))
    assert "topology.lab.link[0] (l1).rate_mbit: must be in [0, 100000], got -5" in lines


def test_delay_line_faster_than_8_gbits_is_refused() -> None:
    lab = copy.deepcopy(INLINE_LAB)
    lab["link"][0].update(rate_mbit=9000, delay_ms=50)
    topology = {"lab": lab, "source": "a", "destination": "b", "paths": ["l1"]}
    lines = errors_of(changed(topology=topology, event=[], matrix={"multilink": "paths"}))
    assert any(
        ln.startswith("topology.lab: link l1 goes through a delay line at 9000") for ln in lines
    )


def test_path_must_touch_the_source() -> None:
    topology = {"lab": "config/lab/equalizer-60-200ms.toml", "source": "src", "destination": "dst"}
    lines = errors_of(changed(topology={**topology, "paths": ["l1", "b"]}, event=[]))
    assert "topology.paths[1]: link b does not touch the source src" in lines


def test_loopback_takes_no_hosts_and_cannot_be_paced() -> None:
    data = changed(event=[], quick=None, matrix={"multilink": "paths"}, baseline=None)
    lines = errors_of({**data, "topology": {"loopback": True, "source": "src"}})
    assert "topology.source: not used with loopback = true" in lines
    assert "matrix.pacing: loopback has no NIC or link rate to pace at; use off" in lines


def test_loss_needs_a_lab() -> None:
    data = changed(event=[], quick=None, matrix={"pacing": "off", "loss": [1e-4]})
    lines = errors_of({**data, "topology": {"loopback": True}})
    assert "matrix.loss: only a lab can add loss, the topology is loopback" in lines


def test_loss_needs_paths_through_a_delay_line() -> None:
    topology = {"lab": INLINE_LAB, "source": "a", "destination": "b", "paths": ["l1"]}
    data = changed(topology=topology, event=[], matrix={"multilink": "paths", "loss": [0, 1e-4]})
    assert any(
        line.startswith("matrix.loss: paths without a delay line") for line in errors_of(data)
    )


def test_mptcp_needs_two_paths() -> None:
    topology = {"lab": INLINE_LAB, "source": "a", "destination": "b", "paths": ["l1"]}
    lines = errors_of(changed(topology=topology, event=[]))
    assert "matrix.multilink: mptcp needs 2 paths or more, the topology has 1" in lines


def test_real_topology_uses_its_links_as_paths() -> None:
    real = {"links": ["tokyo-1", "tokyo-2"], "source_set": "vs-a", "destination_set": "vs-b"}
    topology = {"real": real, "lab": None, "paths": None,
                "source": "site-a", "destination": "site-b"}  # fmt: skip
    c = parse(changed(topology=topology, event=[]))
    t = c.topology
    assert (t.kind, t.paths, t.links, t.source_set, t.destination_set) == (
        "real",
        ("tokyo-1", "tokyo-2"),
        (),
        "vs-a",
        "vs-b",
    )
    assert c.lab_spec(c.scenarios()[0]) is None


def test_reservoir_runs_on_a_real_topology_need_its_volume_sets() -> None:
    topology = {"real": {"links": ["tokyo-1"]}, "lab": None, "paths": None,
                "source": "site-a", "destination": "site-b"}  # fmt: skip
    lines = errors_of(changed(topology=topology, event=[]))
    assert any(ln.startswith("topology.real.source_set: reservoir runs copy") for ln in lines)
    assert any(ln.startswith("topology.real.destination_set: reservoir runs copy") for ln in lines)
    iperf3_only = changed(topology=topology, event=[], quick=None)
    iperf3_only["matrix"] = {**iperf3_only["matrix"], "tool": ["iperf3"], "multilink": "paths"}
    assert not any("_set" in ln for ln in errors_of(iperf3_only))


def test_events_need_a_lab_topology() -> None:
    topology = {"real": {"links": ["tokyo-1", "tokyo-2"]}, "lab": None, "paths": None}
    lines = errors_of(changed(topology=topology))
    assert "event: events need a lab topology (a registered link cannot be cut from here)" in lines
    data = changed(quick=None, matrix={"pacing": "off", "multilink": "paths"})
    loopback = errors_of({**data, "topology": {"loopback": True}})
    assert "event: events need a lab topology (loopback has no links)" in loopback


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ([{"at_s": 10, "action": "link-down", "link": "l9"}],
         "event[0].link: 'l9' is not a link of the lab (l1, l2)"),
        ([{"at_s": 10, "action": "link-up", "link": "l1"}], "event[0]: l1 is not down at 10 s"),
        ([{"at_s": 10, "action": "link-down", "link": "l1"},
          {"at_s": 5, "action": "link-down", "link": "l1"}],
         "event[0]: l1 is already down (event[1])"),
        ([{"at_s": 10, "action": "cut", "link": "l1"}],
         "event[0].action: must be one of link-down, link-up, got 'cut'"),
        ([{"at_s": -1, "action": "link-down", "link": "l1"}],
         "event[0].at_s: must be a number between 0 and 86400, got -1"),
        ([{"at_s": 10, "action": "link-down", "link": "l1", "value": 1}],
         "event[0].value: link-down takes no value"),
        ([{"at_s": 10, "action": "link-down"}], "event[0].link: must be a non-empty string"),
        ([{"at_s": 10, "action": "link-down", "link": "l1", "when": 3}],
         "event[0].when: unknown field (expected action, at_s, link, value)"),
        ([{"at_s": 30, "action": "link-down", "link": "l1"}],
         "event[0].at_s: 30 s is not within every run: iperf3 runs last 30 s (matrix.duration_s)"),
        ({"at_s": 3}, "event: must be an array of tables ([[event]])"),
    ],
)  # fmt: skip
def test_event_errors_name_their_field(events: Any, message: str) -> None:
    assert any(line.startswith(message) for line in errors_of(changed(event=events)))


def test_loss_event_is_refused_with_the_reason_and_the_way_to_do_it() -> None:
    lines = errors_of(changed(event=[{"at_s": 5, "action": "loss", "link": "l1", "value": 1e-4}]))
    (line,) = [ln for ln in lines if ln.startswith("event[0].action:")]
    assert "loss cannot change during a run" in line and "loss = [0, 1e-4]" in line


def test_event_after_the_ideal_end_of_a_copy_is_refused() -> None:
    # 1 GiB at 1000 Mbit/s takes 8.6 s at best: an event at 10 s may never happen
    data = changed(matrix={"size": ["1GiB", "4GiB"]})
    lines = errors_of(data)
    assert any(
        ln.startswith("event[0].at_s: 10 s is not within every run: a reservoir copy of 1GiB")
        for ln in lines
    )


def test_unknown_keys_are_refused_everywhere() -> None:
    data = changed(
        colour="red",
        topology={"rtt_ms": 100},
        matrix={"mtu": [1500], "exclude": [{"streams": 4, "mtu": 1500}]},
        quick={"exclude": []},
    )
    lines = errors_of(data)
    assert any(
        ln.startswith("colour: unknown field (expected baseline, description,") for ln in lines
    )
    assert any(
        ln.startswith("topology.rtt_ms: unknown field (expected bottleneck_mbit,") for ln in lines
    )
    assert any(ln.startswith("matrix.mtu: unknown field (expected cc,") for ln in lines)
    assert any(ln.startswith("matrix.exclude[0].mtu: unknown field") for ln in lines)
    assert any(ln.startswith("quick.exclude: unknown field") for ln in lines)


def test_every_problem_is_reported_at_once() -> None:
    data = changed(
        name="Bad Name",
        repetitions=0,
        topology={"bottleneck_mbit": -1},
        matrix={"streams": [0], "cc": "vegas"},
        event=[{"at_s": 5, "action": "loss", "link": "l1"}],
    )
    lines = errors_of(data)
    fields = {line.split(":")[0] for line in lines}
    assert {"name", "repetitions", "topology.bottleneck_mbit", "matrix.streams[0]", "matrix.cc",
            "event[0].action"} <= fields  # fmt: skip


def test_load_reads_a_file_and_checks_its_name(tmp_path: Path) -> None:
    text = SHIPPED["lfn-2x500m-100ms"].read_text()
    good = tmp_path / "lfn-2x500m-100ms.toml"
    good.write_text(text)
    assert load(good).name == "lfn-2x500m-100ms"
    other = tmp_path / "other.toml"
    other.write_text(text)
    with pytest.raises(CampaignFileError) as info:
        load(other)
    assert str(info.value).splitlines() == [
        f"{other}:",
        "name: must be the file's name without .toml (other), got 'lfn-2x500m-100ms'",
    ]


def test_load_reports_unreadable_and_invalid_toml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(CampaignFileError, match="not valid TOML"):
        load(bad)
    with pytest.raises(CampaignFileError, match="cannot read"):
        load(tmp_path / "missing.toml")


# ------------------------------------------------------------------ time estimates


def test_estimate_adds_run_lengths_setups_and_lab_builds() -> None:
    data = changed(
        matrix={"tool": ["iperf3", "reservoir"], "streams": 8, "pacing": "off",
                "equalizer": True, "multilink": "paths", "size": "1GiB"},
        event=[], quick=None,
    )  # fmt: skip
    c = parse(data)
    reservoir_s = (1 << 30) * 8 / (1000e6 * model.GOODPUT)
    expected = 2 * (30 + model.RUN_SETUP_S + reservoir_s + model.RUN_SETUP_S) + model.LAB_SETUP_S
    assert c.estimate_seconds() == pytest.approx(expected)


def test_estimate_bounds_loss_based_cc_by_mathis() -> None:
    c = load(SHIPPED["lossy"])
    by = by_name(c.scenarios())
    cubic = by["reservoir-s8-pacing_per-nic-eq_on-paths-cubic-loss_1e-3-1GiB"]
    bbr = by["reservoir-s8-pacing_per-nic-eq_on-paths-bbr-loss_1e-3-1GiB"]
    mathis = 8 * 1448 * 8 / 0.2 * 1.22 / math.sqrt(1e-3) / 1e6
    assert model.expected_mbit(cubic, c.topology) == pytest.approx(mathis)
    assert model.expected_mbit(bbr, c.topology) == pytest.approx(1000 * model.GOODPUT)


def test_public_names_are_exactly_all() -> None:
    assert set(campaign.__all__) == {
        "CAMPAIGN_DIR", "DIMENSIONS", "DATA_ROOT", "Campaign", "CampaignFileError", "Event",
        "Matrix", "Scenario", "Topology", "load", "parse", "shipped",
    }  # fmt: skip
    assert all(hasattr(campaign, name) for name in campaign.__all__)
