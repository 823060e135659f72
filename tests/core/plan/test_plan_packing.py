"""The planner: lower bound, fit rules, pools, errors, and the contract every plan keeps."""

from __future__ import annotations

import pytest

from pipelines.core.model import CatalogError, Pool
from pipelines.core.plan import (
    as_pool,
    hardware_of,
    list_schedule,
    lower_bound,
    make_plan,
    override_pools,
    parse_pool_arg,
    pool_for,
    simulate,
)
from pipelines.core.specs import PoolSpec
from tests.conftest import make_test

H200 = PoolSpec("h200", 4, 8, hardware=("h200",))


def t(name: str, est: int, gpus: int, hw: str = "h200", **kw):
    return make_test(id=name, path=f"tests/{name}.py", est_time=est, gpus=gpus,
                     suite=f"stage-c-{gpus}-gpu-{hw}", hardware=hw, **kw)


def assert_valid(plan, tests, pools) -> None:
    """Every planned test exactly once, on a node of its pool, and no node ever oversubscribed."""
    shapes = {p.name: p for p in pools}
    ids = [a.test_id for a in plan.assignments]
    assert sorted(ids) == sorted(x.id for x in tests if x.id not in plan.unplanned)
    assert sorted(a.priority for a in plan.assignments) == list(range(len(ids)))
    for a in plan.assignments:
        assert 0 <= a.node < shapes[a.pool].nodes
        assert a.end_s - a.start_s == pytest.approx(next(x.est_time for x in tests if x.id == a.test_id))
        # GPUs in use on this node at this test's start, itself included
        busy = sum(b.gpus for b in plan.assignments
                   if (b.pool, b.node) == (a.pool, a.node) and b.start_s <= a.start_s < b.end_s)
        assert busy <= shapes[a.pool].gpus_per_node
    assert plan.makespan_s == pytest.approx(max((a.end_s for a in plan.assignments), default=0.0))
    assert plan.makespan_s >= plan.lower_bound_s - 1e-6


def test_lower_bound_is_the_longest_test_when_it_dominates():
    assert lower_bound([(1000, 2), (10, 2)], Pool("p", 4, 8)) == 1000


def test_lower_bound_is_gpu_seconds_over_gpus_when_the_pool_is_full():
    # 8 tests of 4 GPUs x 100 s = 3200 GPU-s on 16 GPUs
    assert lower_bound([(100, 4)] * 8, Pool("p", 2, 8)) == 200


def test_lower_bound_counts_tests_above_half_a_node_one_per_node():
    # 6-GPU tests cannot share an 8-GPU node: 4 x 100 s on 2 nodes take 200 s, not 4*6*100/16 = 150 s
    assert lower_bound([(100, 6)] * 4, Pool("p", 2, 8)) == 200
    # exactly half a node may share: the GPU-seconds bound applies
    assert lower_bound([(100, 4)] * 4, Pool("p", 2, 8)) == 100


def test_a_six_gpu_test_never_shares_an_eight_gpu_node_with_a_four_gpu_one():
    tests = [t("six", 100, 6), t("four", 100, 4)]
    sched = list_schedule([100, 100], [6, 4], [0, 1], nodes=1, gpus_per_node=8)
    assert sched.start == (0.0, 100.0)
    plan = make_plan(tests, [PoolSpec("h200", 1, 8)])
    six, four = sorted(plan.assignments, key=lambda a: a.gpus, reverse=True)
    assert six.end_s <= four.start_s or four.end_s <= six.start_s
    assert plan.makespan_s == 200


def test_two_four_gpu_tests_share_one_node():
    plan = make_plan([t("a", 100, 4), t("b", 100, 4)], [PoolSpec("h200", 1, 8)])
    assert [a.start_s for a in plan.assignments] == [0.0, 0.0]
    assert plan.makespan_s == 100 and plan.pools[0][3] == pytest.approx(1.0)


def test_suite_runs_on_the_pool_named_by_its_hardware():
    pools = [PoolSpec("h100", 2, 8), PoolSpec("big", 4, 8, hardware=("h200", "b200"))]
    assert pool_for(make_test(suite="stage-c-4-gpu-h200", hardware=""), pools).name == "big"
    assert hardware_of(make_test(suite="stage-c-8-gpu-h100", hardware="")) == "h100"
    assert pool_for(make_test(suite="stage-c-4-gpu-mi300", hardware="mi300"), pools) is None


def test_tests_whose_hardware_has_no_pool_are_listed_as_unplanned():
    tests = [t("a", 100, 4), t("b", 100, 8, hw="h100")]
    plan = make_plan(tests, [H200])
    assert plan.unplanned == ("b",)
    assert [a.test_id for a in plan.assignments] == ["a"]


def test_disabled_tests_are_not_planned():
    plan = make_plan([t("a", 100, 4), t("off", 100, 4, disabled="flaky")], [H200])
    assert [a.test_id for a in plan.assignments] == ["a"] and plan.unplanned == ()


def test_a_test_larger_than_every_node_is_unplanned_with_why_and_the_rest_is_planned():
    from pipelines.core.plan.planner import unplanned_reason

    big = t("huge", 100, 16, line=12)
    plan = make_plan([t("a", 100, 4), big], [H200])
    assert [a.test_id for a in plan.assignments] == ["a"] and plan.unplanned == ("huge",)
    assert unplanned_reason(big, [H200]) == (
        "no pool has nodes of 16 GPUs: the test needs 16 GPUs on one node but pool h200 has 8 per node; lower the "
        "suite's GPU count, disable the test, or add a pool with larger nodes in assets/cluster.yaml")


def test_a_negative_gpu_count_is_still_a_located_error():
    with pytest.raises(CatalogError, match=r"tests/bad.py:3: gpus: test bad needs -1 GPUs; must be 0 or more"):
        make_plan([t("a", 100, 4), t("bad", 100, -1, line=3)], [H200])


def test_timeouts_follow_the_runner_rule():
    plan = make_plan([t("short", 100, 2), t("long", 4000, 2)], [H200], timeout_floor_s=1800, timeout_factor=1.25)
    assert {a.test_id: a.timeout_s for a in plan.assignments} == {"short": 1800, "long": 5000}


def test_priorities_follow_predicted_start_times():
    tests = [t(f"x{i}", 100 * (i + 1), 8) for i in range(6)]
    plan = make_plan(tests, [PoolSpec("h200", 2, 8)])
    ordered = plan.ordered()
    assert [a.start_s for a in ordered] == sorted(a.start_s for a in ordered)


def test_each_pool_gets_a_row_and_the_plan_takes_the_worst_pool():
    pools = [H200, PoolSpec("h100", 1, 8)]
    plan = make_plan([t("a", 100, 8), t("b", 300, 8, hw="h100"), t("c", 200, 8, hw="h100")], pools)
    rows = {r[0]: r for r in plan.pools}
    assert rows["h100"][1:3] == (500.0, 500.0) and rows["h200"][1:3] == (100.0, 100.0)
    assert (plan.makespan_s, plan.lower_bound_s) == (500.0, 500.0)
    assert_valid(plan, [t("a", 100, 8), t("b", 300, 8, hw="h100"), t("c", 200, 8, hw="h100")], pools)


def test_with_exact_estimates_dispatch_replays_the_plan():
    tests = [t(f"m{i}", 100 + 37 * i, (2, 4, 8, 6)[i % 4]) for i in range(30)]
    plan = make_plan(tests, [H200], max_evals=200)
    assert_valid(plan, tests, [H200])
    assert simulate(plan, [as_pool(H200)], {x.id: x.est_time for x in tests}) == plan.makespan_s


def test_pool_arguments_parse_and_override_the_deployment():
    assert parse_pool_arg("h200=4x8") == PoolSpec("h200", 4, 8, hardware=("h200",))
    base = (PoolSpec("h200", 1, 8, hardware=("h200", "b200"), image="img"),)
    (p,) = override_pools(base, [parse_pool_arg("h200=6x8")])
    assert (p.nodes, p.hardware, p.image) == (6, ("h200", "b200"), "img")
    with pytest.raises(ValueError, match=r"--pool 'h200=4': expected NAME=NODESxGPUS"):
        parse_pool_arg("h200=4")


def test_duplicate_test_ids_are_an_error_that_names_them():
    with pytest.raises(CatalogError, match=r"tests/a.py:1: id: test id a is planned twice"):
        make_plan([t("a", 100, 4), t("a", 100, 4)], [H200])


def test_a_test_naming_no_hardware_runs_on_the_default_pool_and_unknown_hardware_is_unplanned():
    from pipelines.core.plan import pool_for
    from pipelines.core.specs import PoolSpec

    pools = [PoolSpec("h200", 1, 8), PoolSpec("h100", 1, 8)]
    template = make_test(id="tests/test_t.py::job-a", suite="e2e-megatron", hardware="", fmt="template")
    assert pool_for(template, pools).name == "h200"
    assert pool_for(make_test(suite="stage-c-4-gpu-mi300", hardware=""), pools) is None
    assert pool_for(make_test(suite="stage-c-4-gpu-h100", hardware=""), pools).name == "h100"
    assert pool_for(make_test(suite="stage-c-4-gpu-h200-sxm", hardware=""), [PoolSpec("x", 1, 8, hardware=("h200-sxm",))]).name == "x"
