"""The robustness gate: an improved order replaces longest-first only if noise does not punish it.

An order tuned to the exact estimates can pack a night tightly by starting a long test late;
when actual durations wander around the estimates, that same order can lose to plain
longest-first. So before a plan keeps an improved order, the planner replays it and the
longest-first order with the dispatcher itself (``simulate``, the same ``DispatchQueue`` the
launch loop drives) over a fixed set of lognormal draws of the durations (stratified per test),
and keeps an improved order only when its mean makespan is lower by a clear margin; otherwise
longest-first. The draws depend only on the tests, the seed and the count, so the same input
gives the same plan.
"""

from __future__ import annotations

import math
import random
import statistics
import zlib
from collections.abc import Mapping, Sequence
from statistics import NormalDist

from pipelines.core.model import Assignment, Plan, Test
from pipelines.core.plan.cluster import PoolShape
from pipelines.core.plan.dispatch import simulate
from pipelines.core.plan.durations import Duration
from pipelines.core.plan.packing import Schedule

#: lognormal sigma of the evaluation draws (median = the estimate)
SIGMA = 0.25
#: evaluation draws per pool
EVAL_DRAWS = 32
#: a candidate must beat longest-first by this many standard errors of the paired differences
GATE_Z = 1.0
#: the gate runs only while (tests x draws x orders compared) stays under this many dispatch steps;
#: a larger pool keeps longest-first (an improvement nobody checked against noise is not kept)
GATE_MAX_STEPS = 400_000


def evaluation_draws(tests: Sequence[Test], k: int = EVAL_DRAWS, sigma: float = SIGMA,
                     seed: int = 0, model: Mapping[str, Duration] | None = None) -> list[dict[str, float]]:
    """``k`` maps test id -> actual duration, est_time times lognormal(0, sigma) noise; with a
    duration ``model``, each test's median times lognormal(0, its own sigma) instead.

    Each test's ``k`` durations are the ``k`` quantiles (j + 0.5) / k of its own distribution
    (stratified draws), shuffled into the nights by its id and the seed. So over the nights every
    test takes its median and its p90 as they are: ``k`` free draws per test, the same ones every
    night, put one test's median 0.4 sigma low for good and a one-test night's predicted median
    20 % under its median. The shuffle keeps the tests independent of each other. Adding or
    removing another test does not reshuffle a test's draws, and the result never depends on the
    order of ``tests``.
    """
    out: list[dict[str, float]] = [{} for _ in range(k)]
    z = [NormalDist().inv_cdf((j + 0.5) / k) for j in range(k)]
    rng = random.Random()
    for t in tests:
        rng.seed(zlib.crc32(f"{seed}:{t.id}".encode()))
        base, spread = (model[t.id].median_s, model[t.id].sigma) if model else (float(t.est_time), sigma)
        nights = list(range(k))
        rng.shuffle(nights)
        for j, q in zip(nights, z, strict=True):
            out[j][t.id] = base * math.exp(spread * q)
    return out


def noisy_durations(durations: Sequence[float], k: int, sigma: float | Sequence[float],
                    seed: int) -> list[list[float]]:
    """``k`` lists of the durations times lognormal(0, sigma) noise (the search's own draws);
    ``sigma`` is one spread for all or one per duration."""
    rng = random.Random(seed)
    sigmas = [float(sigma)] * len(durations) if isinstance(sigma, (int, float)) else list(sigma)
    return [[d * rng.lognormvariate(0.0, s) for d, s in zip(durations, sigmas, strict=True)] for _ in range(k)]


def dispatch_order(order: Sequence[int], sched: Schedule) -> list[int]:
    """The priority order a plan hands the dispatcher: predicted start, then search rank."""
    rank = {i: r for r, i in enumerate(order)}
    return sorted(order, key=lambda i: (sched.start[i], rank[i]))


def pool_assignments(group: Sequence[Test], pool: str, order: Sequence[int], sched: Schedule,
                     timeouts: Sequence[int], durations: Sequence[float] | None = None,
                     by_rank: bool = False) -> list[Assignment]:
    """The assignments of one pool, priorities 0.. in dispatch order (``by_rank``: the order
    itself, so a wide test the plan starts late behind backfilled small ones keeps its place at
    the head of the queue); each ends ``durations[i]`` (default est_time) after its start."""
    prio = {i: p for p, i in enumerate(order if by_rank else dispatch_order(order, sched))}
    durs = durations if durations is not None else [float(t.est_time) for t in group]
    return [Assignment(t.id, pool, sched.node[i], sched.start[i], sched.start[i] + durs[i], t.gpus,
                       timeouts[i], prio[i]) for i, t in enumerate(group)]


def makespans(assignments: Sequence[Assignment], pool: PoolShape, draws: Sequence[dict[str, float]],
              expected: tuple[tuple[str, float, float, str], ...] = (), live: bool = False) -> list[float]:
    """The makespan the dispatcher reaches for these assignments in each draw; ``live``: the
    re-planning dispatcher, which reads the tests' ``expected`` (median, p90) like a Plan's."""
    plan = Plan(tuple(assignments), 0.0, 0.0, expected=expected)
    return [simulate(plan, [pool], d, live=live) for d in draws]


def family_z(z: float, challengers: int) -> float:
    """The margin each of ``challengers`` orders must clear so that the chance any of them clears
    it by luck alone is what one order at ``z`` has (Bonferroni, one-sided).

    With several challengers, the best-looking one wins by chance far more often than one would:
    six orders with no real gain, each judged at z = 1, swap the base out about two nights in
    three. On noisy nights (bench/plan.py realistic, sigma 0.5, held-out seeds) such swaps lost
    0.005 of the lower bound on average; at this margin they happen no more often than for one.
    """
    if challengers <= 1:
        return z
    return NormalDist().inv_cdf(1 - (1 - NormalDist().cdf(z)) / challengers)


def gate_affordable(tests: int, draws: int, orders: int) -> bool:
    return tests * draws * orders <= GATE_MAX_STEPS


def pick_robust(candidates: Sequence[list[Assignment]], pool: PoolShape, draws: Sequence[dict[str, float]],
                z: float = GATE_Z, expected: tuple[tuple[str, float, float, str], ...] = (),
                live: bool = False) -> tuple[int, list[float]]:
    """Index of the candidate to keep, and each candidate's mean makespan over ``draws``.

    ``candidates[0]`` is longest-first. Another candidate is kept only when it is faster than
    longest-first by more than ``z`` standard errors of the paired per-draw differences (a
    strict gain for ``z=0``), the lowest mean among those; so the pick is never worse than
    longest-first on these draws, and a gain that is only luck of the draws is not taken.
    """
    runs = [makespans(c, pool, draws, expected, live) for c in candidates]
    means = [statistics.fmean(r) if r else 0.0 for r in runs]
    best = 0
    for i in range(1, len(runs)):
        diffs = [a - b for a, b in zip(runs[0], runs[i], strict=True)]
        gain = statistics.fmean(diffs) if diffs else 0.0
        se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
        if gain > max(z * se, 1e-9 * max(1.0, means[0])) and means[i] < means[best]:
            best = i
    return best, means
