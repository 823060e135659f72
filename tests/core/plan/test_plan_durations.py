"""The duration model: medians and spreads from history, est_time / 1.25 where history is silent."""

from __future__ import annotations

import dataclasses
import math

import pytest

from pipelines.core.model import Sample
from pipelines.core.plan.durations import FALLBACK_SIGMA, PRIOR_SIGMA, duration_model, pooled_sigma, usable
from tests.conftest import make_test

DIGEST = "0" * 64


def sample(test_id: str, elapsed: float, *, day: int = 1, outcome: str = "passed", sha: str = DIGEST,
           hardware: str = "h200", capped: bool = False) -> Sample:
    return Sample(test_id, hardware, sha, outcome, elapsed, f"2026-11-{day:02d}T01:00:00Z", capped=capped)


def test_a_test_without_history_falls_back_to_est_time_without_its_padding():
    t = make_test(id="a", est_time=1250)
    d = duration_model([t], [])["a"]
    assert (d.median_s, d.sigma, d.samples, d.source) == (1000.0, FALLBACK_SIGMA, 0, "fallback")


def test_the_median_is_the_geometric_mean_of_the_passing_runs():
    t = make_test(id="a", est_time=5000)
    d = duration_model([t], [sample("a", 100, day=1), sample("a", 400, day=2)])["a"]
    assert d.median_s == pytest.approx(200.0)
    assert (d.samples, d.source) == (2, "history")


def test_only_passed_uncapped_plausible_runs_of_the_current_digest_on_the_tests_hardware_count():
    t = make_test(id="a", est_time=5000)
    noise = [sample("a", 9000, outcome="failed"), sample("a", 9000, outcome="timed_out", capped=True),
             sample("a", 9000, sha="1" * 64), sample("a", 9000, hardware="mi300"), sample("b", 9000),
             sample("a", 9000, capped=True), dataclasses.replace(sample("a", 9e9), outlier="over the ceiling")]
    assert usable(t, [*noise, sample("a", 300)]) == [300]
    # no passing run, but timed out (capped) on its current file: at least that long (not est_time / 1.25)
    assert duration_model([t], noise)["a"].source == "timeouts"
    assert duration_model([t], [s for s in noise if not s.capped])["a"].source == "fallback"


def test_a_test_that_never_passed_runs_at_least_until_its_timeout_and_failures_are_counted_not_used():
    t = make_test(id="a", est_time=1250)
    timeouts = [sample("a", 1800, day=d, outcome="timed_out", capped=True) for d in (1, 2, 3)]
    d = duration_model([t], timeouts)["a"]
    assert (d.median_s, d.samples, d.failed, d.source) == (1800.0, 3, 0, "timeouts")
    assert d.note == "timed out in its last 3 runs: at least 1800 s"
    mixed = duration_model([t], [*timeouts, sample("a", 30, day=4, outcome="failed")])["a"]
    assert mixed.note == "timed out in 3 of its last 4 runs, never passed: at least 1800 s"
    failed = duration_model([t], [sample("a", 30, day=d, outcome="failed") for d in (1, 2)])["a"]
    assert (failed.median_s, failed.source, failed.note) == (1000.0, "fallback", "no passing run (2 failed): est_time / 1.25")
    assert duration_model([t], [])["a"].note == "no history: est_time / 1.25"
    # one passing run of the file: its history decides, as before
    assert duration_model([t], [*timeouts, sample("a", 600, day=5)])["a"].source == "history"


def test_runs_of_nights_with_extra_environment_are_not_the_tests_durations():
    """A night with --env (CUDA_LAUNCH_BLOCKING, a barrier) ran the test as no plain night does: the
    planner's model leaves it out as calibration does, also from the newest samples it keeps."""
    t = make_test(id="a", est_time=5000)
    slow = dataclasses.replace(sample("a", 400, day=3), env="CUDA_LAUNCH_BLOCKING#3f2a9c1b0d4e")
    plain = [sample("a", 100, day=1), sample("a", 100, day=2)]
    assert usable(t, [*plain, slow]) == [100, 100]
    assert usable(t, [*plain, slow], newest=1) == [100]
    d = duration_model([t], [*plain, slow])["a"]
    assert (d.median_s, d.samples) == (pytest.approx(100.0), 2)
    assert duration_model([t], [slow])["a"].source == "fallback"


def test_only_the_newest_samples_are_used():
    t = make_test(id="a")
    samples = [sample("a", 1000, day=1), sample("a", 10, day=3), sample("a", 10, day=2)]
    assert duration_model([t], samples, max_samples=2)["a"].median_s == pytest.approx(10.0)


def test_a_spread_from_few_samples_is_shrunk_towards_the_pooled_spread():
    # "b" has five runs spread over a factor e; "a" has two identical runs, which alone would
    # claim no spread at all
    b_runs = [100 * math.exp(x) for x in (-1, -0.5, 0, 0.5, 1)]
    tests = [make_test(id="a"), make_test(id="b")]
    samples = [sample("a", 500), sample("a", 500)] + [sample("b", e) for e in b_runs]
    model = duration_model(tests, samples)
    pooled = pooled_sigma([[math.log(500)] * 2, [math.log(e) for e in b_runs]])
    assert pooled > 0.5
    # predictive spread = one run's spread (shrunk: between 0 and the pooled one), widened by the
    # uncertainty of a median known from 2 samples
    one_run = model["a"].sigma / math.sqrt(1 + 1 / 2)
    assert 0 < one_run < pooled
    assert one_run == pytest.approx(math.sqrt(2 * pooled ** 2 / 3))


def test_with_no_test_having_two_samples_the_prior_spread_is_used():
    d = duration_model([make_test(id="a")], [sample("a", 100)])["a"]
    assert d.sigma == pytest.approx(PRIOR_SIGMA * math.sqrt(2))


def test_p90_lies_above_the_median_by_the_spread():
    d = duration_model([make_test(id="a", est_time=1250)], [])["a"]
    assert d.p90_s == pytest.approx(1000 * math.exp(1.2815515655446004 * FALLBACK_SIGMA))
    assert d.quantile(0) == d.median_s


def test_a_run_longer_than_a_day_is_not_used_even_when_history_did_not_mark_it():
    t = make_test(id="a", est_time=5000)
    assert usable(t, [sample("a", 300), sample("a", 200_000, day=2)]) == [300]


def test_a_run_ten_times_off_the_tests_other_runs_is_left_out_as_calibration_does():
    t = make_test(id="a", est_time=5000)
    runs = [sample("a", 100, day=1), sample("a", 110, day=2), sample("a", 5_000, day=3), sample("a", 105, day=4)]
    assert usable(t, runs) == [100, 110, 105]
    assert duration_model([t], runs)["a"].samples == 3


def test_the_median_is_never_below_one_second():
    t = make_test(id="a", est_time=5000)
    d = duration_model([t], [sample("a", 0.001, day=1), sample("a", 0.002, day=2)])["a"]
    assert (d.median_s, d.source) == (1.0, "history")
