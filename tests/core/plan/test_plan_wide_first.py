"""With history, wide tests go first and each pool's queue keeps the planned order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core.model import Pool
from pipelines.core.plan import make_plan, simulate_trace
from pipelines.core.plan.durations import Duration
from pipelines.core.plan.planner import WIDE_EXPONENT, wide_first
from pipelines.core.specs import PoolSpec
from tests.conftest import make_test

TWO_NODES = [PoolSpec("h200", 2, 8)]
SHAPE = [Pool("h200", 2, 8)]
# twelve 2-GPU tests of median 120 s and one 8-GPU test of median 100 s; tonight the small ones
# come in at 60 s and 180 s alternately (a noisy night), the wide one at its median
SMALL = [f"s{i:02d}" for i in range(12)]
ACTUAL = {**{s: 60.0 if i % 2 else 180.0 for i, s in enumerate(SMALL)}, "wide": 100.0}


def night_tests():
    return [make_test(id=s, gpus=2, est_time=150) for s in SMALL] + [make_test(id="wide", gpus=8, est_time=125)]


def model(sigma: float = 0.5) -> dict[str, Duration]:
    return {**{s: Duration(s, 120.0, sigma, 5, "history") for s in SMALL},
            "wide": Duration("wide", 100.0, sigma, 5, "history")}


def run(plan):
    span, trace = simulate_trace(plan, SHAPE, ACTUAL, live=True)
    return span, {a.test_id: start for a, _node, _slots, start, _end in trace}


def test_a_wide_test_starts_first_so_small_tests_fill_the_noisy_tail():
    wide = make_plan(night_tests(), TWO_NODES, durations=model(), improve=False)
    longest = make_plan(night_tests(), TWO_NODES)  # longest-first: the small ones are longer
    assert WIDE_EXPONENT == 0.5  # 100 x 8^0.5 = 283 > 120 x 2^0.5 = 170
    assert wide.ordered()[0].test_id == "wide"
    assert longest.ordered()[-1].test_id == "wide"
    # longest-first: small tests ending at different times keep both nodes partly busy, so the
    # wide test waits for a node to drain (240 s) and then runs alone while the other node idles
    assert run(longest) == (340.0, run(longest)[1]) and run(longest)[1]["wide"] == 240.0
    # wide-first: it runs at once on one node; the small tests then balance the two nodes' ends
    assert run(wide)[0] == 300.0 and run(wide)[1]["wide"] == 0.0


def test_among_equal_keys_the_less_certain_test_goes_first():
    tests = [make_test(id=n, gpus=4, est_time=500) for n in ("sure", "unsure")]
    durations = {"sure": Duration("sure", 400.0, 0.05, 5, "history"),
                 "unsure": Duration("unsure", 400.0, 0.6, 5, "history")}
    assert [tests[i].id for i in wide_first(tests, durations)] == ["unsure", "sure"]


def test_the_queue_keeps_the_planned_order_even_where_the_plan_starts_a_wide_test_later():
    # the long 2-GPU test holds the node, so the list schedule backfills the short one beside it
    # and starts the wide one later; the dispatcher's queue still has the wide one second, so it
    # (not a stream of later small tests) gets the node, and the reservation, once it can
    tests = [make_test(id="long", gpus=2, est_time=1250), make_test(id="w", gpus=8, est_time=500),
             make_test(id="short", gpus=2, est_time=125)]
    durations = {"long": Duration("long", 1000.0, 0.2, 5, "history"), "w": Duration("w", 400.0, 0.2, 5, "history"),
                 "short": Duration("short", 100.0, 0.2, 5, "history")}
    plan = make_plan(tests, [PoolSpec("h200", 1, 8)], durations=durations, improve=False)
    assert [a.test_id for a in plan.ordered()] == ["long", "w", "short"]  # 1414 > 1131 > 141
    starts = {a.test_id: a.start_s for a in plan.assignments}
    assert starts == {"long": 0.0, "short": 0.0, "w": 1000.0}


jobs = st.lists(st.tuples(st.integers(1, 1000), st.sampled_from([1, 2, 4, 6, 8]), st.floats(0.05, 0.8)),
                min_size=1, max_size=20)


@settings(max_examples=25, deadline=None)
@given(jobs, st.integers(1, 3))
def test_a_plan_from_history_runs_every_test_once_within_each_node(jobs, nodes):
    tests = [make_test(id=f"t{i:02d}", gpus=g, est_time=d) for i, (d, g, _) in enumerate(jobs)]
    durations = {t.id: Duration(t.id, float(d), s, 5, "history") for t, (d, _, s) in zip(tests, jobs, strict=True)}
    plan = make_plan(tests, [PoolSpec("h200", nodes, 8)], durations=durations, max_evals=40, predict_draws=4)
    actual = {t.id: d * (1.5 if i % 3 == 0 else 0.7) for i, (t, (d, _, _)) in enumerate(zip(tests, jobs, strict=True))}
    _, trace = simulate_trace(plan, [Pool("h200", nodes, 8)], actual, live=True)
    assert sorted(a.test_id for a, *_ in trace) == sorted(t.id for t in tests)
    for _a, node, _slots, start, _end in trace:
        busy = sum(b.gpus for b, n, _s, s, e in trace if n == node and s <= start < e)
        assert busy <= 8, f"node {node} holds {busy} GPUs at {start}"
    assert sorted(a.priority for a in plan.assignments) == list(range(len(tests)))
