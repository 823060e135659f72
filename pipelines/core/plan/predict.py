"""The night's predicted makespan: median and p90 over simulated noisy nights.

A single makespan computed from expected durations is optimistic: the night ends with its
slowest pool and its latest test, and noise only ever pushes that later. So the planner
replays the finished plan on seeded draws of every test's duration (its median times
lognormal(0, its sigma), stratified so that each test takes its own quantiles over the nights, cut
at the test's timeout, where the runner kills it) and reports the median and p90 of the
makespans. Small nights are replayed with the live dispatcher itself (``DispatchQueue`` with a clock: reservation and
re-planning); large ones with the greedy list schedule, fewer draws, to stay within budget.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from pipelines.core.model import Plan, Pool, Test
from pipelines.core.plan.dispatch import simulate
from pipelines.core.plan.durations import Duration
from pipelines.core.plan.packing import list_schedule
from pipelines.core.plan.robust import evaluation_draws

#: simulated nights per plan
PREDICT_DRAWS = 32
#: dispatcher steps (tests x draws) replayed with the live dispatcher; above, the list schedule
LIVE_STEPS = 20_000
#: list-schedule placements (tests x draws) for a large night; at least MIN_DRAWS draws
LIST_STEPS = 20_000
MIN_DRAWS = 2
#: the predictions' draws are separate from the gate's (same tests, another seed)
SEED_OFFSET = 7919


def predict_makespan(plan: Plan, pools: Sequence[Pool], tests: Sequence[Test], model: Mapping[str, Duration],
                     draws: int = PREDICT_DRAWS, seed: int = 0) -> tuple[float, float]:
    """(median, p90) of the makespan over ``draws`` simulated nights (:func:`night_quantile`)."""
    n = len(plan.assignments)
    if not n or draws <= 0:
        return 0.0, 0.0
    live = n * draws <= LIVE_STEPS
    if not live:
        draws = max(MIN_DRAWS, min(draws, LIST_STEPS // n))
    # a test cannot run longer than its timeout: the runner kills it there
    timeouts = {a.test_id: float(a.timeout_s) for a in plan.assignments if a.timeout_s > 0}
    nights = [{k: min(v, timeouts.get(k, v)) for k, v in night.items()}
              for night in evaluation_draws(tests, draws, seed=seed + SEED_OFFSET, model=model)]
    if live:
        spans = sorted(simulate(plan, pools, d, live=True) for d in nights)
    else:
        queues = _queues(plan, pools)
        spans = sorted(_greedy(queues, d) for d in nights)
    return statistics.median(spans), night_quantile(spans, 0.9)


def night_quantile(spans: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted ``spans``, read between the nights at position q x n - 0.5.

    Each test's draws are the quantiles (j + 0.5) / n of its distribution (``evaluation_draws``),
    so on a one-test night this is the test's own p90 (nearest rank, the 29th of 32 nights, is
    its p89: 3 % low at sigma 0.5); the median is the same as ``statistics.median``.
    """
    pos = min(max(q * len(spans) - 0.5, 0.0), len(spans) - 1.0)
    lo = int(pos)
    hi = min(lo + 1, len(spans) - 1)
    return spans[lo] + (spans[hi] - spans[lo]) * (pos - lo)


def predicted_text(median_s: float, p90_s: float, makespan_s: float) -> str:
    """The night's predicted makespan as every line of a run says it: the simulated nights' median
    beside their p90 (what the night's record stores and the prediction error judges), or the
    schedule's makespan alone for a plan made without durations (no simulated nights)."""
    if median_s:
        return f"predicted median makespan {median_s:.1f}s (p90 {p90_s:.1f}s)"
    return f"predicted makespan {makespan_s:.1f}s"


def _queues(plan: Plan, pools: Sequence[Pool]) -> list[tuple[Pool, list[str], list[int]]]:
    """Each pool with its tests' ids and GPUs in priority order (the same for every draw)."""
    out = []
    for pool in pools:
        mine = sorted((a for a in plan.assignments if a.pool == pool.name), key=lambda a: a.priority)
        if mine:
            out.append((pool, [a.test_id for a in mine], [a.gpus for a in mine]))
    return out


def _greedy(queues: Sequence[tuple[Pool, list[str], list[int]]], actual: Mapping[str, float]) -> float:
    """The greedy dispatcher's makespan, pool by pool, via the fast list schedule."""
    span = 0.0
    for pool, ids, gpus in queues:
        s = list_schedule([actual[t] for t in ids], gpus, range(len(ids)), pool.nodes, pool.gpus_per_node)
        span = max(span, s.makespan)
    return span
