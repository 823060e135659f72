"""The improvement step is never worse than the longest-first list schedule, and can be better."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core.model import Pool
from pipelines.core.plan import list_schedule, lower_bound, lpt_order
from pipelines.core.plan.improve import improve_order

jobs = st.lists(st.tuples(st.integers(1, 1000), st.sampled_from([1, 2, 4, 5, 6, 8])), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(jobs, st.integers(1, 4), st.integers(0, 3))
def test_improvement_never_worsens_the_list_schedule(jobs, nodes, seed):
    d = [float(x) for x, _ in jobs]
    g = [y for _, y in jobs]
    order = lpt_order(d, g, [str(i) for i in range(len(d))])
    plain = list_schedule(d, g, order, nodes, 8)
    bound = lower_bound(zip(d, g, strict=True), Pool("p", nodes, 8))
    better_order, better = improve_order(d, g, order, nodes, 8, bound=bound, max_evals=60, seed=seed)
    assert better.makespan <= plain.makespan
    assert better.makespan >= bound - 1e-6
    assert sorted(better_order) == list(range(len(d)))
    assert list_schedule(d, g, better_order, nodes, 8) == better


def test_small_instances_are_searched_exhaustively_past_a_bad_longest_first_start():
    # Graham's example on two whole-node runners: longest-first runs 300+200+200 on one node
    # (700 s); 300+300 beside 200+200+200 finishes at the lower bound, 600 s
    d = [300.0, 300.0, 200.0, 200.0, 200.0]
    g = [8] * 5
    order = lpt_order(d, g, [str(i) for i in range(5)])
    assert list_schedule(d, g, order, 2, 8).makespan == 700
    bound = lower_bound(zip(d, g, strict=True), Pool("p", 2, 8))
    _, best = improve_order(d, g, order, 2, 8, bound=bound)
    assert (bound, best.makespan) == (600, 600)
