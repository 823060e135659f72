"""The predicted makespan replays the plan on simulated nights that obey each test's timeout."""

from __future__ import annotations

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
    assert (median, p90) == (statistics.median(spans), spans[8])
    assert len({a.pool for a in plan.assignments}) == 2
