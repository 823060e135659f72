"""The predicted makespan replays the plan on simulated nights that obey each test's timeout."""

from __future__ import annotations

import pytest

from pipelines.core.model import Assignment, Plan, Pool
from pipelines.core.plan.durations import Duration
from pipelines.core.plan.predict import predict_makespan
from tests.conftest import make_test


def test_a_simulated_run_never_outlasts_the_tests_timeout():
    tests = [make_test(id="slow", gpus=8), make_test(id="next", gpus=8)]
    plan = Plan((Assignment("slow", "h200", 0, 0, 100, 8, timeout_s=100, priority=0),
                 Assignment("next", "h200", 0, 100, 150, 8, timeout_s=1800, priority=1)), 150.0, 150.0)
    model = {"slow": Duration("slow", 10_000.0, 0.0, 3, "history"), "next": Duration("next", 50.0, 0.0, 3, "history")}
    assert predict_makespan(plan, [Pool("h200", 1, 8)], tests, model, draws=4) == (150.0, 150.0)


def test_a_large_night_replayed_with_the_list_schedule_cuts_at_the_timeout_too(monkeypatch):
    import pipelines.core.plan.predict as predict

    monkeypatch.setattr(predict, "LIVE_STEPS", 0)
    tests = [make_test(id="slow", gpus=8)]
    plan = Plan((Assignment("slow", "h200", 0, 0, 100, 8, timeout_s=100),), 100.0, 100.0)
    model = {"slow": Duration("slow", 10_000.0, 0.0, 3, "history")}
    assert predict_makespan(plan, [Pool("h200", 1, 8)], tests, model, draws=4) == (100.0, 100.0)


def test_a_large_night_is_the_greedy_dispatchers_night_on_every_pool(monkeypatch):
    """The list-schedule replay (nights too large for the live dispatcher) must give what the
    greedy dispatcher itself gives on the same draws, pool by pool in each pool's priority order."""
    import random
    import statistics

    import pipelines.core.plan.predict as predict
    from pipelines.core.plan import make_plan, simulate
    from pipelines.core.plan.robust import evaluation_draws
    from pipelines.core.specs import PoolSpec

    monkeypatch.setattr(predict, "LIVE_STEPS", 0)
    rng = random.Random(5)
    tests = [make_test(id=f"t{i:02d}", est_time=rng.randint(60, 3000), gpus=rng.choice((1, 2, 4, 8)),
                       suite=f"stage-c-x-gpu-{hw}", hardware=hw)
             for i, hw in enumerate(["h200", "h100"] * 20)]
    pools = [PoolSpec("big", 3, 8, hardware=("h200",)), PoolSpec("small", 2, 8, hardware=("h100",))]
    model = {t.id: Duration(t.id, t.est_time / 1.25, 0.4, 3, "history") for t in tests}
    plan = make_plan(tests, pools, improve=False)
    shapes = [predict.Pool(p.name, p.nodes, p.gpus_per_node) for p in pools]
    median, p90 = predict.predict_makespan(plan, shapes, tests, model, draws=10, seed=3)
    limit = {a.test_id: float(a.timeout_s) for a in plan.assignments}
    spans = sorted(simulate(plan, shapes, {k: min(v, limit[k]) for k, v in d.items()})
                   for d in evaluation_draws(tests, 10, seed=3 + predict.SEED_OFFSET, model=model))
    assert (median, p90) == (statistics.median(spans), predict.night_quantile(spans, 0.9))
    assert len({a.pool for a in plan.assignments}) == 2


def test_a_one_test_night_predicts_that_tests_own_median_and_p90_whatever_its_id():
    """Each test's simulated durations take its own quantiles: with 32 free draws per test, the
    same every night, one id's night was predicted at 0.82 x its median (below the lower bound)."""
    import math

    from pipelines.core.plan import make_plan
    from pipelines.core.plan.durations import Z90
    from pipelines.core.specs import PoolSpec

    for i in range(150):
        test = make_test(id=f"tests/e2e/test_{i:03d}.py", path=f"tests/e2e/test_{i:03d}.py", est_time=1000, gpus=8,
                         suite="stage-c-8-gpu-h200")
        for sigma in (0.25, 0.5):
            model = {test.id: Duration(test.id, 800.0, sigma, 3, "history")}
            plan = make_plan([test], [PoolSpec("h200", 1, 8)], durations=model)
            assert plan.lower_bound_s == 800.0
            assert plan.predicted_median_s == pytest.approx(800.0, rel=0.005), test.id
            assert plan.predicted_p90_s == pytest.approx(800.0 * math.exp(Z90 * sigma), rel=0.01), test.id


def test_the_simulated_nights_keep_each_tests_own_spread_and_tests_independent():
    import math
    import statistics

    from pipelines.core.plan.robust import evaluation_draws

    tests = [make_test(id=f"t{i:03d}") for i in range(300)]
    model = {t.id: Duration(t.id, 100.0, 0.5, 3, "history") for t in tests}
    nights = evaluation_draws(tests, 32, seed=7, model=model)
    for t in tests:
        logs = sorted(math.log(n[t.id] / 100.0) for n in nights)
        assert statistics.median(logs) == pytest.approx(0.0, abs=0.02)
        assert statistics.pstdev(logs) == pytest.approx(0.5, rel=0.05)
    # the tests are not drawn in step: two tests' log durations over the nights are uncorrelated on average
    a = [[math.log(n[t.id]) for n in nights] for t in tests[:40]]
    corr = [statistics.correlation(a[i], a[i + 1]) for i in range(39)]
    assert abs(statistics.fmean(corr)) < 0.1 and max(corr) < 0.99
