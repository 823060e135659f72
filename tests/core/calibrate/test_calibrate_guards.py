"""Calibration resists poison: implausible samples are left out with a reason, proposals are bounded,
and a too-large step waits for explicit acceptance."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipelines.core.calibrate import POLICIES, calibrate, estimates_by_id
from pipelines.core.model import Sample
from tests.conftest import make_test

NOW = datetime(2026, 12, 20, tzinfo=UTC)


def s(elapsed: float, i: int = 0, **kw) -> Sample:
    base = dict(test_id="tests/e2e/test_a.py", hardware="h200", sha256="0" * 64, outcome="passed",
                elapsed_s=elapsed, started_at=(NOW - timedelta(days=1, minutes=i)).isoformat(), source=f"n.log:{i}")
    return Sample(**{**base, **kw})


def one(samples, policy="bucket125", params=None, **test_kw):
    return calibrate([make_test(**test_kw)], samples, policy, params, now=NOW)[0]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_billion_second_sample_is_an_outlier_not_a_proposal(policy):
    e = one([s(100, 1), s(102, 2), s(104, 3), s(1e9, 4)], policy, est_time=150)
    assert e.max_s == 104 and e.samples_used == 3
    assert e.outliers == ("n.log:4: elapsed 1e+09 s is outside 0..86400 s",)
    assert "1 implausible left out" in e.reason


def test_samples_marked_when_stored_are_never_used():
    e = one([s(100, 1), s(0.0, 2, outlier="elapsed nan is not a finite number")], est_time=150)
    assert (e.samples_used, e.max_s) == (1, 100)
    assert e.outliers == ("n.log:2: elapsed nan is not a finite number",)


def test_a_pass_far_below_the_tests_own_history_is_left_out():
    """A 5 s pass among 100 s ones did not really run (a skip): left out, with where and why."""
    e = one([s(100, 1), s(110, 2), s(105, 3), s(5, 4)], "median", est_time=150)
    assert (e.samples_used, e.median_s) == (3, 105)
    assert e.outliers == ("n.log:4: elapsed 5 s is far below the test's own history "
                          "(lower median of its runs 100 s, allowed x10)",)


@pytest.mark.parametrize("policy", ["bucket125", "p90", "median"])
def test_long_passes_kept_do_not_make_the_typical_runs_look_short(policy):
    """Two cold-cache passes of 600 s beside three of 30 s: the long ones are kept (a timeout must cover
    them), and the typical 30 s runs must not be judged "far below" a median the long ones raised (315 s),
    which left every policy but bucket125 with too few samples to calibrate at all."""
    e = one([s(30, 1), s(30, 2), s(30, 3), s(600, 4), s(600, 5)], policy, est_time=700)
    assert (e.samples_used, e.outliers) == (5, ())
    assert "implausible" not in e.reason


@pytest.mark.parametrize(("policy", "wanted"), [("bucket125", 3800), ("p90", 3000), ("median", 108)])
def test_a_pass_far_above_the_tests_own_history_counts_and_a_large_raise_is_held_not_dropped(policy, wanted):
    """est_time is a timeout: a run that really passed in 3000 s proves the test can take that long, so
    no policy leaves it out (bucket125 and p90 would propose a timeout that kills the next one); the step
    guard, not the outlier guard, holds the x25 raise for a maintainer's acceptance."""
    e = one([s(100, 1), s(110, 2), s(105, 3), s(3000, 4)], policy, est_time=150)
    assert (e.max_s, e.samples_used, e.outliers) == (3000, 4, ())
    assert "n.log:4" in e.sources and "implausible" not in e.reason
    assert (e.proposed, e.held) == ((150, wanted) if wanted > 600 else (wanted, None))


def test_the_planners_duration_model_still_leaves_out_a_run_far_above_the_others():
    """Its median predicts a typical night: one cold-cache run is no typical duration (unchanged)."""
    from pipelines.core.plan.durations import usable

    t = make_test()
    assert usable(t, [s(100, 4), s(110, 3), s(105, 2), s(3000, 1)]) == [100, 110, 105]


def test_with_two_samples_neither_is_called_the_odd_one():
    e = one([s(100, 1), s(3000, 2)], params={"max_step_factor": 100}, est_time=150)
    assert e.max_s == 3000 and e.outliers == ()


def test_a_configured_ceiling_applies():
    e = one([s(100, 1), s(900, 2)], params={"ceiling_s": 600}, est_time=150)
    assert e.max_s == 100
    assert e.outliers == ("n.log:2: elapsed 900 s is outside 0..600 s",)


def test_a_large_step_is_held_for_acceptance_and_not_applied():
    e = one([s(1000, 1)], est_time=100)
    assert (e.proposed, e.held) == (100, 1300)
    assert ("held for acceptance: 1300 s moves est_time 100 s by x13, more than max_step_factor x4 in one step; "
            "to apply it, add 'tests/e2e/test_a.py' to the repo's calibration: accept: list") in e.reason
    accepted = one([s(1000, 1)], params={"accept": ("tests/e2e/test_a.py",)}, est_time=100)
    assert (accepted.proposed, accepted.held) == (1300, None)
    assert estimates_by_id([e]) == {"tests/e2e/test_a.py": 100}


def test_a_step_within_the_factor_applies_and_an_uncalibrated_test_is_not_held():
    assert one([s(300, 1)], est_time=100).proposed == 400
    first = one([s(20, 1)], est_time=1800, est_source="default")
    assert (first.proposed, first.held) == (30, None)


@pytest.mark.parametrize(("est_time", "runs"), [(1, [0.4]), (1, [2.0]), (2, [0.4, 1.5]), (2, [2.0])])
def test_a_one_or_two_second_est_time_reaches_bucket125s_first_bucket_without_acceptance(est_time, runs):
    """bucket125 never proposes under 10 s: from est_time 1 s (framework M's fast CPU folder) the move to
    10 s is no step, else such a test would be held at 1 s for good."""
    e = one([s(x, i) for i, x in enumerate(runs)], est_time=est_time)
    assert (e.proposed, e.held) == (10, None) and "held" not in e.reason


def test_from_a_tiny_est_time_a_large_step_is_counted_from_the_first_bucket_and_still_held():
    e = one([s(40, 1)], est_time=1)  # 40 x 1.25 = 50 s: x5 from 10 s, bucket125's least proposal
    assert (e.proposed, e.held) == (1, 50)
    assert ("held for acceptance: 50 s moves est_time 1 s by x50, x5 from 10 s, the least the policy proposes, "
            "more than max_step_factor x4 in one step") in e.reason
    assert one([s(30, 1)], est_time=1).proposed == 40  # x4 from 10 s: applies
    assert one([s(30, 1)], est_time=10).proposed == 40  # the same step from a registered 10 s
    lower = _in_force([s(0.4, 1)], 60, est_time=60)  # a real x6 lowering is still held
    assert (lower.proposed, lower.held) == (60, 10)


@pytest.mark.parametrize("policy", ["p90", "median"])
def test_p90_and_median_propose_whole_seconds_so_a_tiny_est_time_is_judged_as_it_is(policy):
    """Their least proposal is 1 s, below which no est_time is registered: a fast test moves freely,
    and x5 from 1 s is held as from any other value."""
    fast = one([s(0.4, 1), s(1.5, 2), s(1.2, 3)], policy, est_time=1)
    assert (fast.proposed, fast.held) == (2, None)
    slow = one([s(5, 1), s(5, 2), s(5, 3)], policy, est_time=1)
    assert (slow.proposed, slow.held) == (1, 5)
    assert "moves est_time 1 s by x5, more than" in slow.reason


@pytest.mark.parametrize(("policy", "start"), [("p90", 1), ("bucket125", 10)])
def test_an_est_time_of_0_is_a_placeholder_whose_large_step_is_held(policy, start):
    """The SGLang family registers est_time 0; 0 -> 43 s is x43 from the 1 s a policy proposes at least,
    not exempt from the guard because nothing can be divided by 0."""
    e = one([s(43, 1), s(43, 2), s(43, 3)], policy, est_time=0)
    assert e.held is not None and e.proposed == 0
    assert f"moves est_time 0 s by x{e.held / start:.3g} from {start} s, the least the policy proposes," in e.reason
    small = one([s(2, 1), s(2, 2), s(2, 3)], "p90", est_time=0)
    assert (small.proposed, small.held) == (2, None)  # x2 from 1 s applies


def test_no_proposal_goes_above_the_upper_bound_even_when_accepted():
    e = one([s(80_000, 1)], params={"accept": ("tests/e2e/test_a.py",)}, est_time=70_000)
    assert e.proposed == 86_400
    assert "capped at max_est_time_s 86400 s (wanted 100000 s)" in e.reason


def _in_force(samples, in_force, policy="bucket125", **test_kw):
    t = make_test(**test_kw)
    return calibrate([t], samples, policy, now=NOW, in_force={(t.id, t.hardware): in_force})[0]


def test_the_step_is_judged_from_the_calibrated_est_time_in_force_not_the_registered_one():
    """Registered 3, calibrated to 10 last night: 20 is x2 from what is in force, so it applies."""
    e = _in_force([s(6.6, 2), s(8.6, 1)], 10, est_time=3)  # 9 s as the runner logs it: 12 s, the 20 s bucket
    assert (e.current, e.in_force, e.proposed, e.held, e.baseline) == (3, 10, 20, None, 10)


def test_a_held_proposal_keeps_the_est_time_in_force():
    e = _in_force([s(70, 1)], 20, est_time=3)
    assert (e.proposed, e.held) == (20, 90)
    assert "held for acceptance: 90 s moves the calibrated est_time in force 20 s by x4.5" in e.reason
    assert estimates_by_id([e]) == {"tests/e2e/test_a.py": 20}


def test_without_enough_samples_the_est_time_in_force_is_kept():
    e = _in_force([s(70, 1)], 20, policy="p90", est_time=3)
    assert (e.proposed, e.samples_used, e.held) == (20, 0, None) and "keeps est_time" in e.reason


def test_a_default_est_time_once_calibrated_is_guarded_like_any_other():
    assert _in_force([s(20, 1)], 30, est_time=1800, est_source="default").proposed == 30
    e = _in_force([s(900, 1)], 30, est_time=1800, est_source="default")
    assert (e.proposed, e.held) == (30, 1200)


def _ago(elapsed: float, days: float, outcome: str = "passed") -> Sample:
    return s(elapsed, started_at=(NOW - timedelta(days=days)).isoformat(), outcome=outcome,
             capped=outcome == "timed_out", source=f"{outcome}:{days:g}")


def test_an_est_time_in_force_without_a_passing_sample_in_the_window_falls_back_to_the_registered_one():
    """Calibrated down to 300 s from old passes; the test now takes longer than the 1800 s timeout and
    is killed every night: without a pass in the window the 300 s must not stay in force."""
    history = [_ago(230, 40 + i) for i in range(5)] + [_ago(1800, i, "timed_out") for i in range(1, 8)]
    e = _in_force(history, 300, policy="p90", est_time=3600)
    assert (e.proposed, e.samples_used, e.held, e.in_force) == (3600, 0, None, None), e.reason
    assert ("released the calibrated est_time 300 s in force: no passing sample in the last 21 days; "
            "back to the registered est_time 3600 s") in e.reason
    assert estimates_by_id([e]) == {}
    # a pass inside the window (the newest run) still keeps it: too few for p90, but evidence for it
    kept = _in_force([*history, _ago(250, 0.5)], 300, policy="p90", est_time=3600)
    assert (kept.proposed, kept.in_force) == (300, 300) and "keeps est_time" in kept.reason


def test_a_timeout_kill_releases_an_est_time_in_force_below_the_registered_one_and_is_not_held():
    """In force 300 s; passes of 1500 s were held (x5); then the timeout killed it: back to the
    registered 3600 s, a x12 step the guard does not hold."""
    history = [_ago(1500, 10 + i) for i in range(5)] + [_ago(1800, i, "timed_out") for i in (1, 2)]
    e = _in_force(history, 300, policy="p90", est_time=3600)
    assert (e.proposed, e.held, e.in_force, e.samples_used) == (3600, None, None, 5), e.reason
    assert ("released the calibrated est_time 300 s in force: the newest run was killed at the timeout after "
            "1800 s; judged from the registered est_time 3600 s again, never below it") in e.reason
    # before the kill the held proposal keeps the value in force
    before = _in_force(history[:5], 300, policy="p90", est_time=3600)
    assert (before.proposed, before.held, before.in_force) == (300, 1500, 300)
    # a kill with an est_time in force above the registered one is no grounds to go back down
    above = _in_force([_ago(3000, 3), _ago(3500, 2), _ago(4000, 1, "timed_out")], 4500, est_time=3600)
    assert above.in_force == 4500 and "released" not in above.reason


def test_the_median_of_the_others_is_what_statistics_gives_for_every_value_ties_included():
    """One sort for all samples (a test keeps thousands under bucket125) must give, for each value,
    exactly the median of the list without it: odd and even counts, ties, one value repeated."""
    import random
    import statistics

    from pipelines.core.calibrate.guards import medians_of_others

    rng = random.Random(3)
    cases = [[5.0, 5.0], [1.0, 2.0, 3.0], [7.0] * 6, [1.0, 100.0, 100.0, 2.0]]
    cases += [[rng.choice([1.0, 2.5, 3.0, rng.uniform(0, 100)]) for _ in range(rng.randint(2, 11))] for _ in range(500)]
    for values in cases:
        assert medians_of_others(values) == [statistics.median(values[:i] + values[i + 1:])
                                             for i in range(len(values))], values
    with pytest.raises(ValueError):
        medians_of_others([1.0])
