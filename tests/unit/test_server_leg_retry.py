"""The scheduler's retries of copies that failed for a side they could not reach:
when a resume is due, when a streak ends, and when the transfer fails after all."""

from __future__ import annotations

import itertools

from reservoir.server.domain.leg_retry import FIRST_DELAY, MAX_DELAY, Retries, Step

MiB = 1 << 20


def test_a_first_failure_begins_a_streak_and_the_resumes_back_off() -> None:
    retries = Retries(retry_for=600)
    step, streak = retries.step("c", 4 * MiB, now=100.0)
    assert step is Step.BEGIN and streak.next_at == 100.0 + FIRST_DELAY
    assert retries.step("c", 4 * MiB, now=101.0)[0] is Step.WAIT
    resumed: list[float] = []
    now = 100.0
    while len(resumed) < 8:
        now += 1.0
        step, streak = retries.step("c", 4 * MiB, now)
        if step is Step.RESUME:
            resumed.append(now)
    gaps = [b - a for a, b in itertools.pairwise(resumed)]
    assert resumed[0] == 100.0 + FIRST_DELAY
    assert gaps == [4.0, 8.0, 16.0, 32.0, MAX_DELAY, MAX_DELAY, MAX_DELAY]
    assert streak.attempts == 8


def test_a_streak_older_than_retry_for_gives_up_and_is_forgotten() -> None:
    retries = Retries(retry_for=30)
    retries.step("c", 0, now=0.0)
    assert retries.step("c", 0, now=29.0)[0] in (Step.RESUME, Step.WAIT)
    step, streak = retries.step("c", 0, now=30.0)
    assert step is Step.GIVE_UP and streak.attempts >= 1
    assert "c" not in retries
    assert retries.step("c", 0, now=31.0)[0] is Step.BEGIN  # a user's resume: anew


def test_a_copy_that_got_further_before_failing_again_begins_a_new_streak() -> None:
    retries = Retries(retry_for=30)
    retries.step("c", 1 * MiB, now=0.0)
    assert retries.step("c", 1 * MiB, now=FIRST_DELAY)[0] is Step.RESUME
    step, streak = retries.step("c", 9 * MiB, now=29.0)  # it copied 8 MiB, then failed
    assert step is Step.BEGIN and streak.since == 29.0 and streak.attempts == 0
    assert retries.step("c", 9 * MiB, now=50.0)[0] is not Step.GIVE_UP


def test_no_retries_when_retry_for_is_zero() -> None:
    assert Retries(retry_for=0).step("c", 0, now=0.0)[0] is Step.GIVE_UP


def test_forget_ends_a_streak() -> None:
    retries = Retries(retry_for=30)
    retries.step("c", 0, now=0.0)
    retries.forget("c")
    assert "c" not in retries
    retries.forget("c")  # twice: nothing to forget
