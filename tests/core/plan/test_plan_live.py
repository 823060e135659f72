"""The re-planning dispatcher: predicted ends move with the night, the head's GPUs are reserved."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core.model import Assignment, Plan, Pool
from pipelines.core.plan import DispatchQueue, make_plan, simulate, simulate_trace
from pipelines.core.plan import live as live_mod
from pipelines.core.plan.durations import Z90, Duration
from pipelines.core.plan.live import SPEED_PRIOR, LiveModel
from pipelines.core.specs import PoolSpec
from tests.conftest import make_test

ONE_NODE = Pool("h200", 1, 8)


def plan_of(*specs: tuple[str, float, int], sigma: float = 0.0) -> Plan:
    """Assignments in the given order (priority = position), expected to take exactly ``d`` s."""
    assignments = tuple(Assignment(tid, "h200", 0, 0.0, float(d), g, 1800, prio)
                        for prio, (tid, d, g) in enumerate(specs))
    expected = tuple((tid, float(d), float(d) * math.exp(Z90 * sigma), "history") for tid, d, _ in specs)
    return Plan(assignments, 0.0, 0.0, expected=expected)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# a stream of staggered 4-GPU tests around one whole-node test (priority 1)
STREAM = (("x1", 100, 4), ("big", 100, 8), ("x2", 150, 4), ("x3", 100, 4), ("x4", 150, 4), ("x5", 100, 4))


def starts(plan: Plan, live: bool) -> dict[str, float]:
    _, trace = simulate_trace(plan, [ONE_NODE], {a.test_id: a.end_s - a.start_s for a in plan.assignments}, live=live)
    return {a.test_id: start for a, _node, _slots, start, _end in trace}


def test_a_whole_node_test_is_not_starved_by_a_stream_of_small_ones():
    plan = plan_of(*STREAM)
    # greedy backfill: a 4-GPU test always fits beside another, so the whole-node test waits for all of them
    assert starts(plan, live=False)["big"] == 300.0
    # live: after waiting its own expected 100 s (PATIENCE), the node is reserved for it; x2,
    # already running, ends at 150 s and nothing new takes the GPUs it frees
    assert live_mod.PATIENCE == 1.0
    assert starts(plan, live=True)["big"] == 150.0


def test_without_patience_the_head_is_reserved_at_once(monkeypatch):
    monkeypatch.setattr(live_mod, "PATIENCE", 0.0)
    assert starts(plan_of(*STREAM), live=True)["big"] == 100.0


def test_a_later_test_that_ends_before_the_reservation_still_fills_the_gap(monkeypatch):
    monkeypatch.setattr(live_mod, "PATIENCE", 0.0)
    clock = Clock()
    q = DispatchQueue(plan_of(("a", 100, 6), ("b", 100, 8), ("c", 300, 2), ("d", 10, 2)), [ONE_NODE], clock=clock)
    # b waits for a's 6 GPUs (reserved from 100 s); c would hold 2 of them until 300 s, d is done by 10 s
    assert [a.test_id for a, *_ in q.start_ready()] == ["a", "d"]
    clock.now = 10.0
    q.finish("d")
    assert q.start_ready() == []
    clock.now = 100.0
    q.finish("a")
    assert [a.test_id for a, *_ in q.start_ready()] == ["b"]


def test_a_backfill_that_fills_the_node_goes_before_one_that_would_leave_a_hole():
    """6 GPUs free beside a long 2-GPU test, the whole-node head waiting: the 2-GPU test next in priority
    would leave 4 there that only more 2-GPU tests fit, one after another, while the 6-GPU test after it
    fills them; a first that fills its node, or two that both leave some over, keep priority order."""
    clock = Clock()
    q = DispatchQueue(plan_of(("long", 1000, 2), ("head", 100, 8), ("two", 100, 2), ("six", 100, 6)), [ONE_NODE],
                      clock=clock)
    assert [a.test_id for a, *_ in q.start_ready()] == ["long", "six"]
    q = DispatchQueue(plan_of(("long", 1000, 2), ("head", 100, 8), ("six", 100, 6), ("two", 100, 2)), [ONE_NODE],
                      clock=clock)
    assert [a.test_id for a, *_ in q.start_ready()] == ["long", "six"]
    q = DispatchQueue(plan_of(("long", 1000, 2), ("head", 100, 8), ("two", 100, 2), ("four", 100, 4),
                              ("two2", 100, 2)), [ONE_NODE], clock=clock)
    assert [a.test_id for a, *_ in q.start_ready()] == ["long", "two", "four"]


def test_without_a_clock_the_queue_backfills_greedily_as_before():
    q = DispatchQueue(plan_of(("a", 100, 6), ("b", 100, 8), ("c", 300, 2), ("d", 10, 2)), [ONE_NODE])
    assert [a.test_id for a, *_ in q.start_ready()] == ["a", "c"]


def test_a_running_test_past_its_median_is_predicted_to_run_on():
    live = LiveModel(plan_of(("a", 100, 8), sigma=0.5))
    live.started("a", 0.0)
    assert live.predicted_end("a", 0.0) == pytest.approx(100.0)
    later = live.predicted_end("a", 150.0)
    assert 150.0 < later < 250.0


def test_a_night_running_slow_moves_every_prediction_later():
    live = LiveModel(plan_of(("a", 100, 2), ("b", 100, 2), ("c", 100, 2)))
    for tid in ("a", "b"):
        live.started(tid, 0.0)
        live.finished(tid, 200.0)
    assert live.speed() == pytest.approx(math.exp(2 * math.log(2) / (2 + SPEED_PRIOR)))
    live.started("c", 200.0)
    assert live.predicted_end("c", 200.0) == pytest.approx(200.0 + 100 * live.speed())


def test_a_plan_made_from_est_time_is_expected_to_take_its_planned_interval():
    plan = Plan((Assignment("a", "h200", 0, 0.0, 600.0, 8, 1800),), 600.0, 600.0)
    live = LiveModel(plan)
    live.started("a", 0.0)
    assert live.predicted_end("a", 0.0) == pytest.approx(600.0)


def test_the_reservation_is_the_earliest_node_with_enough_gpus_and_what_it_leaves_over():
    live = LiveModel(plan_of(("a", 300, 4), ("b", 100, 6), ("c", 50, 2)))
    for tid in "abc":
        live.started(tid, 0.0)
    a, b, c = plan_of(("a", 300, 4), ("b", 100, 6), ("c", 50, 2)).assignments
    # node 0: 4 free, a (4) ends at 300; node 1: 0 free, c ends at 50 -> 2, b ends at 100 -> 8
    assert live.reservation(6, [4, 0], [(a, 0), (b, 1), (c, 1)], 0.0) == (1, 100.0, 2)
    assert live.reservation(4, [4, 0], [(a, 0), (b, 1), (c, 1)], 0.0) == (0, 0.0, 0)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 500), st.sampled_from([1, 2, 3, 4, 6, 8])), min_size=1, max_size=25),
       st.lists(st.floats(0.1, 3.0), min_size=25, max_size=25))
def test_the_live_dispatcher_runs_every_test_once_and_never_oversubscribes_a_node(jobs, noise):
    tests = [make_test(id=f"t{i}", path=f"tests/t{i}.py", est_time=d, gpus=g) for i, (d, g) in enumerate(jobs)]
    model = {t.id: Duration(t.id, t.est_time / 1.25, 0.3, 3, "history") for t in tests}
    plan = make_plan(tests, [PoolSpec("h200", 2, 8)], max_evals=20, durations=model, predict_draws=2)
    actual = {f"t{i}": d * noise[i] for i, (d, _) in enumerate(jobs)}
    pool = Pool("h200", 2, 8)
    makespan, trace = simulate_trace(plan, [pool], actual, live=True)
    assert sorted(a.test_id for a, *_ in trace) == sorted(t.id for t in tests)
    for a, node, slots, start, _end in trace:
        held = [g for b, n, s, s0, e0 in trace if n == node and s0 <= start < e0 for g in s]
        assert len(slots) == a.gpus and len(held) == len(set(held)) <= 8
    assert makespan == simulate(plan, [pool], actual, live=True)
