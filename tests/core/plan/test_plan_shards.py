"""Static shards reproduce the framework's split exactly, and show as a Plan for comparison."""

from __future__ import annotations

from pipelines.core.plan import shard_makespan, shards_gpus, shards_plan, static_shards
from tests.conftest import make_test


def t(path: str, est: int, suite: str = "stage-c-4-gpu-h200", gpus: int = 4, **kw):
    return make_test(id=path, path=path, est_time=est, suite=suite, gpus=gpus, **kw)


def test_shards_sort_longest_first_then_by_file_and_fill_the_least_loaded_shard():
    tests = [t("tests/e.py", 100), t("tests/b.py", 300), t("tests/a.py", 300), t("tests/c.py", 200),
             t("tests/d.py", 200), t("tests/f.py", 50)]
    (shards,) = static_shards(tests, {"stage-c-4-gpu-h200": 2}).values()
    # a(300)->0, b(300)->1, c(200)->0 (tie at 300: lowest index), d(200)->1, e(100)->0, f(50)->1
    assert [[x.path for x in s] for s in shards] == [
        ["tests/a.py", "tests/c.py", "tests/e.py"], ["tests/b.py", "tests/d.py", "tests/f.py"]]


def test_ties_in_running_sums_go_to_the_lowest_shard_index():
    tests = [t(f"tests/{n}.py", 100) for n in "abcd"]
    (shards,) = static_shards(tests, {"stage-c-4-gpu-h200": 3}).values()
    assert [[x.path for x in s] for s in shards] == [["tests/a.py", "tests/d.py"], ["tests/b.py"], ["tests/c.py"]]


def test_suites_without_a_count_get_one_shard_and_disabled_tests_none():
    tests = [t("tests/a.py", 10, suite="stage-b-2-gpu-h200", gpus=2), t("tests/b.py", 20, suite="stage-b-2-gpu-h200", gpus=2),
             t("tests/off.py", 99, suite="stage-b-2-gpu-h200", gpus=2, disabled="broken")]
    shards = static_shards(tests, {})
    assert [[x.path for x in s] for s in shards["stage-b-2-gpu-h200"]] == [["tests/b.py", "tests/a.py"]]


def test_the_shard_plan_runs_each_shard_back_to_back_and_counts_the_runners_gpus():
    tests = [t("tests/a.py", 300), t("tests/b.py", 200), t("tests/c.py", 100),
             t("tests/x.py", 500, suite="stage-c-8-gpu-h200", gpus=8)]
    shards = static_shards(tests, {"stage-c-4-gpu-h200": 2})
    plan = shards_plan(shards, timeout_floor_s=60, timeout_factor=1.25)
    got = {a.test_id: (a.pool, a.node, a.start_s, a.end_s, a.timeout_s) for a in plan.assignments}
    assert got == {"tests/a.py": ("stage-c-4-gpu-h200", 0, 0.0, 300.0, 375),
                   "tests/b.py": ("stage-c-4-gpu-h200", 1, 0.0, 200.0, 250),
                   "tests/c.py": ("stage-c-4-gpu-h200", 1, 200.0, 300.0, 125),
                   "tests/x.py": ("stage-c-8-gpu-h200", 0, 0.0, 500.0, 625)}
    assert plan.makespan_s == 500.0 and shards_gpus(shards) == 2 * 4 + 8
    actual = {"tests/a.py": 10.0, "tests/b.py": 400.0, "tests/c.py": 300.0, "tests/x.py": 600.0}
    assert shard_makespan(shards, actual) == 700.0


def test_the_shard_plan_runs_on_given_durations_and_keeps_timeouts_on_est_time():
    tests = [t("tests/a.py", 2000), t("tests/b.py", 400)]
    shards = static_shards(tests, {"stage-c-4-gpu-h200": 2})
    plan = shards_plan(shards, timeout_floor_s=60, durations={"tests/a.py": 1600.0})
    got = {a.test_id: (a.start_s, a.end_s, a.timeout_s) for a in plan.assignments}
    assert got == {"tests/a.py": (0.0, 1600.0, 2500), "tests/b.py": (0.0, 400.0, 500)}  # b: not given, est_time
    assert plan.makespan_s == 1600.0
