"""Planning from measured durations: medians order and place, est_time still sets the timeout."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core.model import Pool, Sample
from pipelines.core.plan import make_plan, simulate
from pipelines.core.plan.durations import Duration, duration_model
from pipelines.core.plan.planner import MODEL_EVAL_DRAWS
from pipelines.core.plan.robust import evaluation_draws
from pipelines.core.specs import PoolSpec
from tests.conftest import make_test

POOLS = [PoolSpec("h200", 2, 8)]


def model_of(*specs: tuple[str, float, float]) -> dict[str, Duration]:
    return {tid: Duration(tid, med, sigma, 5, "history") for tid, med, sigma in specs}


def test_without_durations_the_plan_is_made_from_est_time_and_predicts_nothing_more():
    plan = make_plan([make_test(id="a", est_time=1000, gpus=8)], POOLS)
    assert (plan.makespan_s, plan.predicted_median_s, plan.predicted_p90_s, plan.expected) == (1000, 0.0, 0.0, ())


def test_medians_place_the_tests_and_est_time_still_sets_the_timeout():
    tests = [make_test(id="a", est_time=3000, gpus=8), make_test(id="b", est_time=1000, gpus=8)]
    plan = make_plan(tests, POOLS, timeout_floor_s=0, durations=model_of(("a", 400.0, 0.2), ("b", 700.0, 0.2)))
    by_id = {a.test_id: a for a in plan.assignments}
    assert (by_id["a"].end_s - by_id["a"].start_s, by_id["b"].end_s - by_id["b"].start_s) == (400.0, 700.0)
    assert (by_id["a"].timeout_s, by_id["b"].timeout_s) == (3750, 1250)
    assert plan.makespan_s == 700.0 and plan.lower_bound_s == 700.0


def test_a_test_the_model_does_not_know_falls_back_to_est_time_without_padding_and_says_so():
    tests = [make_test(id="a", est_time=1250, gpus=8), make_test(id="b", est_time=500, gpus=8)]
    plan = make_plan(tests, POOLS, durations=model_of(("b", 300.0, 0.1)))
    expected = {tid: (med, source) for tid, med, _p90, source in plan.expected}
    assert expected == {"a": (1000.0, "fallback"), "b": (300.0, "history")}


def test_a_long_and_uncertain_test_starts_before_an_equally_long_sure_one():
    tests = [make_test(id=n, est_time=1000, gpus=8) for n in ("sure", "unsure", "other")]
    model = model_of(("sure", 500.0, 0.05), ("unsure", 500.0, 0.6), ("other", 100.0, 0.05))
    plan = make_plan(tests, [PoolSpec("h200", 1, 8)], durations=model)
    assert [a.test_id for a in plan.ordered()] == ["unsure", "sure", "other"]


def test_the_predicted_makespan_is_a_median_and_a_p90_and_the_same_every_time():
    tests = [make_test(id=f"t{i}", est_time=100 * (i + 1), gpus=4) for i in range(8)]
    model = model_of(*((f"t{i}", 80.0 * (i + 1), 0.4) for i in range(8)))
    plan = make_plan(tests, POOLS, durations=model)
    assert 0 < plan.predicted_median_s <= plan.predicted_p90_s
    assert plan.predicted_median_s != plan.makespan_s  # drawn, not the makespan on medians
    assert make_plan(tests, POOLS, durations=model) == plan


def test_a_plan_from_history_predicts_the_measured_night_not_the_padded_one():
    # est_time = measured max x 1.25 rounded up: the plan from est_time predicts that padding
    tests = [make_test(id=f"t{i}", est_time=1300, gpus=8) for i in range(4)]
    samples = [Sample(t.id, t.hardware, t.sha256, "passed", e, f"2026-11-0{d}T00:00:00Z")
               for t in tests for d, e in ((1, 980.0), (2, 1000.0), (3, 1020.0))]
    padded = make_plan(tests, POOLS)
    measured = make_plan(tests, POOLS, durations=duration_model(tests, samples))
    assert padded.makespan_s == 2600
    assert 1900 < measured.predicted_median_s < 2300


jobs = st.lists(st.tuples(st.integers(1, 1000), st.sampled_from([1, 2, 3, 4, 6, 8]), st.floats(0.0, 1.0)),
                min_size=1, max_size=25)


@settings(max_examples=25, deadline=None)
@given(jobs, st.integers(1, 4))
def test_every_test_is_placed_within_the_bound_and_no_worse_than_wide_first_on_the_model(jobs, nodes):
    tests = [make_test(id=f"t{i:02d}", est_time=d, gpus=g) for i, (d, g, _) in enumerate(jobs)]
    model = model_of(*((f"t{i:02d}", d * 0.7, s) for i, (d, _, s) in enumerate(jobs)))
    pools = [PoolSpec("h200", nodes, 8)]
    ours = make_plan(tests, pools, durations=model, max_evals=40, predict_draws=4)
    base = make_plan(tests, pools, durations=model, improve=False, predict_draws=4)
    assert sorted(a.test_id for a in ours.assignments) == sorted(t.id for t in tests)
    assert ours.makespan_s >= ours.lower_bound_s - 1e-6
    # the contract with a model: no worse than the base order (wide-first, what improve=False
    # gives) on the mean over the nights the gate draws from the model, replayed with the live
    # dispatcher. The makespan on the medians alone may be longer: a rule can trade it for a
    # safer noisy night.
    draws = evaluation_draws(tests, MODEL_EVAL_DRAWS, model=model)
    pool = Pool("h200", nodes, 8)
    mean = [statistics.fmean(simulate(p, [pool], d, live=True) for d in draws) for p in (ours, base)]
    assert mean[0] <= mean[1] + 1e-6


def test_a_test_that_names_no_gpu_type_is_planned_only_from_its_runs_on_the_pools_hardware():
    """An L40S night's durations once planned an H200 night for tests whose suite names no GPU type:
    their samples were all recorded with hardware "" and the model matched "" == ""."""
    from pipelines.core.history.samples import sample_from_attempt
    from pipelines.core.model import Attempt
    from pipelines.core.plan.cluster import pool_for, ran_on

    test = make_test(id="tests/test_sft.py", path="tests/test_sft.py", suite="e2e-test-fsdp", hardware="", gpus=8,
                     est_time=1000)
    typed = make_test(id="tests/test_h200.py", path="tests/test_h200.py", suite="stage-c-8-gpu-h200", hardware="h200",
                      gpus=8)
    l40s, h200 = PoolSpec("l40s", 1, 8, hardware=("l40s",)), PoolSpec("h200", 1, 8, hardware=("h200",))
    # the pool a test that names no GPU type ran on is the hardware its runs are recorded with
    assert (ran_on(test, pool_for(test, [l40s])), ran_on(test, pool_for(test, [h200]))) == ("l40s", "h200")
    assert ran_on(typed, pool_for(typed, [l40s, h200])) == "h200"
    on_l40s = [sample_from_attempt(Attempt(test.id, "passed", secs, f"2026-11-0{day}T01:00:00Z"), test, "r",
                                   hardware=ran_on(test, l40s)) for day, secs in enumerate((300.0, 310.0, 290.0), 1)]
    assert {s.hardware for s in on_l40s} == {"l40s"}
    assert duration_model([test], on_l40s, hardware={test.id: "l40s"})[test.id].source == "history"
    tonight = duration_model([test], on_l40s, hardware={test.id: "h200"})[test.id]
    assert (tonight.source, tonight.median_s) == ("fallback", 800.0)


def test_runs_recorded_before_samples_were_keyed_by_the_pool_count_until_the_first_run_on_its_hardware():
    test = make_test(id="t", suite="e2e-test-fsdp", hardware="", gpus=8, est_time=1000)
    old = [Sample("t", "", test.sha256, "passed", secs, f"2026-11-0{d}T01:00:00Z") for d, secs in ((1, 100.0), (2, 110.0))]
    assert duration_model([test], old, hardware={"t": "h200"})["t"].source == "history"
    new = old + [Sample("t", "h200", test.sha256, "passed", 500.0, "2026-11-05T01:00:00Z")]
    after = duration_model([test], new, hardware={"t": "h200"})["t"]
    assert (after.source, after.samples, round(after.median_s, 6)) == ("history", 1, 500.0)
    # another pool's runs never stand in for them
    other = old + [Sample("t", "l40s", test.sha256, "passed", 40.0, "2026-11-05T01:00:00Z")]
    assert duration_model([test], other, hardware={"t": "h200"})["t"].median_s == pytest.approx(
        statistics.geometric_mean([100, 110]))


def test_calibration_of_a_test_that_names_no_gpu_type_takes_its_runs_on_every_pool():
    """Its est_time is one literal whatever runs it: the slowest pool's runs must fit its timeout."""
    from pipelines.core.calibrate import calibrate

    test = make_test(id="t", suite="e2e-test-fsdp", hardware="", gpus=8, est_time=400)
    runs = [Sample("t", hw, test.sha256, "passed", secs, f"2026-11-0{d}T01:00:00Z")
            for d, (hw, secs) in enumerate((("", 100.0), ("h200", 120.0), ("l40s", 400.0)), 1)]
    [estimate] = calibrate([test], runs)
    assert (estimate.samples_used, estimate.proposed) == (3, 500)  # 400 s x 1.25
