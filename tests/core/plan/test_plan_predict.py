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
