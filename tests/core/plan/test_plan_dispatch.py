"""The pure dispatcher: GPUs never oversubscribed, priority respected, early finishes used."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core.model import Assignment, Plan, Pool
from pipelines.core.plan import DispatchQueue, make_plan, simulate, simulate_trace
from pipelines.core.specs import PoolSpec
from tests.conftest import make_test

POOL = Pool("h200", 2, 8)


def plan_of(*specs: tuple[str, int, int]) -> Plan:
    """Assignments in the given order (priority = position); times do not matter to dispatch."""
    return Plan(tuple(Assignment(tid, "h200", 0, 0.0, float(d), g, 1800, prio)
                      for prio, (tid, d, g) in enumerate(specs)), 0.0, 0.0)


def test_tests_start_in_priority_order_on_one_node_each():
    q = DispatchQueue(plan_of(("a", 10, 8), ("b", 10, 4), ("c", 10, 4), ("d", 10, 2)), [POOL])
    started = q.start_ready()
    assert [(a.test_id, node, slots) for a, node, slots in started] == [
        ("a", 0, tuple(range(8))), ("b", 1, (0, 1, 2, 3)), ("c", 1, (4, 5, 6, 7))]
    assert [a.test_id for a in q.pending()] == ["d"]
    q.finish("b")
    assert [(a.test_id, node, slots) for a, node, slots in q.start_ready()] == [("d", 1, (0, 1))]
    assert not q.done()


def test_a_later_small_test_fills_gpus_the_waiting_head_cannot_use():
    q = DispatchQueue(plan_of(("a", 10, 6), ("b", 10, 8), ("c", 10, 2)), [Pool("h200", 1, 8)])
    assert [a.test_id for a, *_ in q.start_ready()] == ["a", "c"]
    q.finish("a")
    assert q.start_ready() == []  # b needs the whole node; c still holds 2 GPUs
    q.finish("c")
    assert [a.test_id for a, *_ in q.start_ready()] == ["b"]
    q.finish("b")
    assert q.done()


def test_finishing_an_unknown_test_is_an_error():
    q = DispatchQueue(plan_of(("a", 10, 2)), [POOL])
    with pytest.raises(KeyError, match="nope is not running"):
        q.finish("nope")


def test_a_plan_that_does_not_fit_its_pools_is_refused_up_front():
    with pytest.raises(ValueError, match=r"a: needs 16 GPUs, pool h200 nodes have 8; b: pool 'h100' is not one of"):
        DispatchQueue(Plan((Assignment("a", "h200", 0, 0, 1, 16, 1), Assignment("b", "h100", 0, 0, 1, 8, 1, 1)),
                           1, 1), [POOL])


def test_an_early_finish_lets_the_next_test_start_at_once():
    tests = [make_test(id=n, path=f"tests/{n}.py", est_time=100, gpus=8) for n in "abc"]
    pools = [PoolSpec("h200", 2, 8)]
    plan = make_plan(tests, pools)
    first = plan.ordered()[0].test_id
    actual = {"a": 100.0, "b": 100.0, "c": 100.0, first: 10.0}
    assert simulate(plan, [POOL], actual) == 110.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 500), st.sampled_from([1, 2, 3, 4, 6, 8])), min_size=1, max_size=25),
       st.lists(st.floats(0.1, 3.0), min_size=25, max_size=25))
def test_dispatch_never_oversubscribes_a_node_and_starts_in_priority_order(jobs, noise):
    tests = [make_test(id=f"t{i}", path=f"tests/t{i}.py", est_time=d, gpus=g) for i, (d, g) in enumerate(jobs)]
    plan = make_plan(tests, [PoolSpec("h200", 2, 8)], max_evals=30)
    actual = {f"t{i}": d * noise[i] for i, (d, _) in enumerate(jobs)}
    _, trace = simulate_trace(plan, [POOL], actual)
    assert sorted(a.test_id for a, *_ in trace) == sorted(t.id for t in tests)
    for a, node, slots, start, _end in trace:
        assert len(slots) == a.gpus == len(set(slots))
        overlapping = [s for b, n, s, s0, e0 in trace if n == node and s0 <= start < e0]
        held = [g for s in overlapping for g in s]
        assert len(held) == len(set(held)) <= 8
    # a test only starts after, or together with, every test of higher priority and the same size
    by_size: dict[int, list[float]] = {}
    for a, *_rest, start, _ in sorted(trace, key=lambda x: x[0].priority):
        assert all(s <= start for s in by_size.get(a.gpus, []))
        by_size.setdefault(a.gpus, []).append(start)


def test_strict_list_order_starts_nothing_past_a_waiting_head():
    q = DispatchQueue(plan_of(("a", 10, 6), ("b", 10, 8), ("c", 10, 2)), [Pool("h200", 1, 8)], backfill=False)
    assert [a.test_id for a, *_ in q.start_ready()] == ["a"]
    q.finish("a")
    assert [a.test_id for a, *_ in q.start_ready()] == ["b"]


def test_a_requeued_retry_starts_first_on_another_node_once_gpus_free_there():
    q = DispatchQueue(plan_of(("a", 10, 8), ("b", 10, 8), ("c", 10, 8), ("d", 10, 8)), [POOL])
    assert [(a.test_id, node) for a, node, _ in q.start_ready()] == [("a", 0), ("b", 1)]
    q.finish("b")
    q.requeue(plan_of(("b", 10, 8)).assignments[0], 1)  # b failed on node 1: retry elsewhere
    assert not q.done()
    assert [(a.test_id, node) for a, node, _ in q.start_ready()] == [("c", 1)]  # node 1 may run another test
    assert [a.test_id for a in q.pending()] == ["b", "d"]  # the retry is first
    q.finish("a")
    assert [(a.test_id, node) for a, node, _ in q.start_ready()] == [("b", 0)]  # before d, on the node it did not leave
    q.finish("c")
    assert [(a.test_id, node) for a, node, _ in q.start_ready()] == [("d", 1)]
    for t in "bd":
        q.finish(t)
    assert q.done()
    with pytest.raises(ValueError, match="no node other than 0"):
        DispatchQueue(plan_of(("a", 10, 8)), [Pool("h200", 1, 8)]).requeue(plan_of(("a", 10, 8)).assignments[0], 0)
