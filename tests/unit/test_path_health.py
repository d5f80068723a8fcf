"""RI2N-style path health: a pure state machine driven with explicit times."""

from __future__ import annotations

import pytest

from reservoir.agent import paths
from reservoir.agent.paths import HealthConfig, PathEvent, PathHealth, PathState


def drive(
    health: PathHealth, start: float, end: float, step: float, active: list[str]
) -> list[PathEvent]:
    """Make ``active`` paths progress every ``step`` s from ``start`` to ``end``; tick each step.

    Acked bytes grow with time (1 MB/s), so successive calls keep the counters monotonic.
    """
    events: list[PathEvent] = []
    t = start
    while t <= end + 1e-9:
        for name in active:
            health.progress(name, t, int(t * 1e6) + 1)
        events += health.tick(t)
        t = round(t + step, 6)
    return events


def two_paths(config: HealthConfig | None = None) -> PathHealth:
    health = PathHealth(config)
    health.add_path("A", 0.0)
    health.add_path("B", 0.0)
    for name in ("A", "B"):
        health.progress(name, 0.0, 0)
    return health


def test_path_silent_while_other_progresses_fails_after_slow_tout() -> None:
    health = two_paths()
    drive(health, 0.0, 0.2, 0.01, ["A", "B"])  # both healthy: no events
    events = drive(health, 0.21, 0.5, 0.01, ["A"])  # B stops after t=0.2
    (event,) = events
    assert (event.path, event.old, event.new) == ("B", PathState.UP, PathState.FAILED)
    assert 0.3 - 1e-9 <= event.at <= 0.3 + 0.12  # SLOW_TOUT after its last progress
    assert "while path A progressed" in event.reason
    assert event.reason.startswith("silent for ")
    assert health.state("A") is PathState.UP


def test_path_silent_less_than_slow_tout_does_not_fail() -> None:
    health = two_paths()
    drive(health, 0.0, 0.2, 0.01, ["A", "B"])
    assert drive(health, 0.21, 0.28, 0.01, ["A"]) == []
    assert health.state("B") is PathState.UP


def test_slow_but_alive_path_does_not_fail() -> None:
    health = two_paths()
    events: list[PathEvent] = []
    for i in range(1, 200):
        t = i * 0.005
        health.progress("A", t, i * 1000)
        if i % 10 == 0:  # B acks every 50 ms, A every 5 ms
            health.progress("B", t, i * 100)
        events += health.tick(t)
    assert events == []


def test_both_paths_idle_never_fail() -> None:
    health = two_paths()
    events: list[PathEvent] = []
    for i in range(100):
        events += health.tick(i * 0.1)
    assert events == []
    assert health.states() == {"A": PathState.UP, "B": PathState.UP}


def test_failed_path_recovers_on_answered_heartbeat_then_up_on_traffic() -> None:
    health = two_paths()
    drive(health, 0.0, 0.5, 0.01, ["A"])
    assert health.state("B") is PathState.FAILED
    health.heartbeat("B", 2.0, ok=False)
    assert health.tick(2.0) == []
    health.heartbeat("B", 4.0, ok=True)
    (recovered,) = health.tick(4.0)
    assert (recovered.path, recovered.at) == ("B", 4.0)
    assert (recovered.old, recovered.new) == (PathState.FAILED, PathState.RECOVERED)
    health.progress("B", 4.5, 10_000)
    (up,) = health.tick(4.5)
    assert (up.old, up.new, up.at) == (PathState.RECOVERED, PathState.UP, 4.5)


def test_recovered_path_goes_up_on_next_heartbeat() -> None:
    health = two_paths()
    drive(health, 0.0, 0.5, 0.01, ["A"])
    health.heartbeat("B", 2.0, ok=True)
    health.heartbeat("B", 4.0, ok=True)
    events = health.tick(4.0)
    assert [(e.new, e.at) for e in events] == [(PathState.RECOVERED, 2.0), (PathState.UP, 4.0)]


def test_answered_heartbeat_counts_hbweight() -> None:
    health = PathHealth(HealthConfig(hbweight=3))
    health.heartbeat("A", 0.0, ok=True)
    assert health.counter("A") == 3


def test_heartbeats_keep_an_idle_path_from_failing() -> None:
    health = two_paths()
    events: list[PathEvent] = []
    for i in range(1, 100):
        t = i * 0.01
        health.progress("A", t, i * 1000)
        if i % 4 == 0:
            health.heartbeat("B", t, ok=True)  # HBWEIGHT=3 keeps B above FT_LTHRESH
        events += health.tick(t)
    assert events == []


def test_single_path_fails_after_missed_heartbeats() -> None:
    health = PathHealth()
    health.add_path("only", 0.0)
    for k in (1, 2):
        health.heartbeat("only", 2.0 * k, ok=False)
        assert health.tick(2.0 * k) == []
    health.heartbeat("only", 6.0, ok=False)
    (event,) = health.tick(6.0)
    assert (event.path, event.new, event.at) == ("only", PathState.FAILED, 6.0)
    assert event.reason == "3 heartbeats missed"


def test_answered_heartbeat_resets_missed_count() -> None:
    health = PathHealth()
    for t, ok in [(2.0, False), (4.0, False), (6.0, True), (8.0, False), (10.0, False)]:
        health.heartbeat("only", t, ok=ok)
        assert health.tick(t) == []
    assert health.state("only") is PathState.UP


def test_single_path_recovers_on_answered_heartbeat() -> None:
    health = PathHealth(HealthConfig(hb_miss_limit=1))
    health.heartbeat("only", 2.0, ok=False)
    health.tick(2.0)
    health.heartbeat("only", 4.0, ok=True)
    (event,) = health.tick(4.0)
    assert event.new is PathState.RECOVERED


def test_thresholds_are_configurable() -> None:
    config = HealthConfig(ft_hthresh=50, ft_lthresh=0, slow_tout=0.5)
    health = two_paths(config)
    drive(health, 0.0, 0.1, 0.01, ["A", "B"])
    assert drive(health, 0.11, 0.55, 0.01, ["A"]) == []  # 0.45 s silent < 0.5 s
    (event,) = drive(health, 0.56, 2.0, 0.01, ["A"])
    assert event.path == "B"
    assert event.at >= 0.6  # silent >= 0.5 s, and only once A passed 50 units


def test_a_far_path_still_starting_is_given_its_round_trips() -> None:
    """A 350 ms path whose streams are still logging in and in slow start is not failed
    because a near path already completes commands: 16 round trips before its first
    progress, then 4 (the SC2003 paths at 350 ms, failed in 1.25 s before)."""
    health = two_paths(HealthConfig(ft_hthresh=5, slow_tout=1.0))
    health.set_rtt("B", 0.0, 0.35)
    assert health.silence_limit("B") == pytest.approx(16 * 0.35)
    assert drive(health, 0.0, 5.5, 0.1, ["A"]) == []
    (event,) = drive(health, 5.6, 6.0, 0.1, ["A"])
    assert (event.path, event.new) == ("B", PathState.FAILED)


def test_a_far_path_that_ran_is_silent_after_four_round_trips() -> None:
    health = two_paths(HealthConfig(ft_hthresh=5, slow_tout=1.0))
    health.set_rtt("B", 0.0, 0.35)
    drive(health, 0.0, 2.0, 0.1, ["A", "B"])
    assert health.silence_limit("B") == pytest.approx(4 * 0.35)
    assert drive(health, 2.1, 3.3, 0.1, ["A"]) == []  # 1.3 s: under 4 round trips
    (event,) = drive(health, 3.4, 3.6, 0.1, ["A"])
    assert (event.path, event.new) == ("B", PathState.FAILED)


def test_a_slow_path_is_judged_on_its_usual_gap_between_completions() -> None:
    """A path that completes a command every second (a deep queue on a thin link) is
    silent after 4 of its gaps, not after slow_tout."""
    health = two_paths(HealthConfig(ft_hthresh=5, slow_tout=1.0))
    for i in range(1, 11):
        health.progress("B", float(i), i)
    drive(health, 10.0, 13.9, 0.1, ["A"])
    assert health.state("B") is PathState.UP
    assert health.silence_limit("B") == pytest.approx(4.0)
    (event,) = drive(health, 14.0, 14.2, 0.1, ["A"])
    assert (event.path, event.new) == ("B", PathState.FAILED)


def test_default_config_is_the_papers() -> None:
    config = HealthConfig()
    assert (config.ft_hthresh, config.ft_lthresh, config.hbweight) == (10, 1, 3)
    assert (config.slow_tout, config.hbspan, config.hb_miss_limit) == (0.1, 2.0, 3)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ft_lthresh": 10},
        {"slow_tout": 0.0},
        {"hbweight": 0},
        {"hb_miss_limit": 0},
        {"rtt_factor": -1},
    ],
)
def test_invalid_config_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        HealthConfig(**kwargs)  # type: ignore[arg-type]


def test_removed_path_is_forgotten() -> None:
    health = two_paths()
    health.remove_path("B")
    assert health.states() == {"A": PathState.UP}
    with pytest.raises(KeyError):
        health.state("B")


def test_public_surface_is_exactly_all() -> None:
    public = {name for name in vars(paths) if not name.startswith("_")}
    assert public - {"health"} == set(paths.__all__)
