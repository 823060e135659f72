"""Improve a priority order: exhaustive for a handful of tests, local search otherwise.

The search only ever replaces the current order by one that scores at least as well, starting
from the list schedule, and never accepts an order whose exact makespan is worse than the start,
so every order it returns is no worse than plain longest-first on the estimates. The exact score
is the makespan, then the other nodes' finish times (a tie-breaker that rewards freeing nodes
early and lets the search walk across plateaus of equal makespan); with noisy draws the mean
noisy makespan comes first. The planner's robustness gate (``robust.py``) then decides whether
any of the returned orders replaces longest-first.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Sequence

from pipelines.core.plan.packing import Schedule, list_schedule
from pipelines.core.plan.robust import dispatch_order, noisy_durations

#: up to this many tests on a pool, every order is tried
EXHAUSTIVE_MAX = 6
#: test placements the local search may simulate per pool (bounds the work by instance size)
MAX_STEPS = 300_000
#: fewer candidates than this within MAX_STEPS: not worth a search (the pool keeps its order)
MIN_EVALS = 20


def _score(s: Schedule) -> tuple[float, ...]:
    return (s.makespan, *s.finish)


def improve_order(durations: Sequence[float], gpus: Sequence[int], order: list[int], nodes: int,
                  gpus_per_node: int, *, bound: float, time_budget_s: float = 0.3,
                  max_evals: int = 4000, stall: int = 500, seed: int = 0,
                  robust: int = 0, sigma: float | Sequence[float] = 0.25,
                  max_steps: int = MAX_STEPS) -> tuple[list[int], Schedule]:
    """A priority order whose list schedule is no worse than ``order``'s, and that schedule.

    The best of :func:`improve_candidates` (same arguments).
    """
    return improve_candidates(durations, gpus, order, nodes, gpus_per_node, bound=bound,
                              time_budget_s=time_budget_s, max_evals=max_evals, stall=stall, seed=seed,
                              robust=robust, sigma=sigma, max_steps=max_steps)[-1]


def improve_candidates(durations: Sequence[float], gpus: Sequence[int], order: list[int], nodes: int,
                       gpus_per_node: int, *, bound: float, time_budget_s: float = 0.3,
                       max_evals: int = 4000, stall: int = 500, seed: int = 0,
                       robust: int = 0, sigma: float | Sequence[float] = 0.25,
                       max_steps: int = MAX_STEPS) -> list[tuple[list[int], Schedule]]:
    """``order`` and every order the search moved to as a new best, best last; each one's
    exact makespan is no worse than ``order``'s (the robustness gate chooses among them).

    Stops at ``bound`` (nothing can beat the lower bound), after ``max_evals`` candidates, after
    ``stall`` candidates without a better score, once ``max_steps`` test placements have been
    simulated (this fixes the work by instance size, so the same input gives the same result),
    or before ``time_budget_s`` seconds would be exceeded (a safety net on a slow machine).

    With ``robust`` > 0 the local search scores an order by its mean makespan over that many
    lognormal(0, ``sigma``) draws of the durations (one sigma, or one per test; the same draws
    for every order), replayed in the dispatcher's priority order (predicted start), then by its
    exact score; it never accepts an order whose exact makespan is worse than the starting one.
    """
    bound = _granular(bound, durations)
    t0 = time.perf_counter()
    best = list_schedule(durations, gpus, order, nodes, gpus_per_node)
    one = time.perf_counter() - t0
    n = len(order)
    found = [(list(order), best)]
    if n < 2 or best.makespan <= bound * (1 + 1e-9):
        return found
    deadline = time.perf_counter() + time_budget_s
    if n <= EXHAUSTIVE_MAX:
        for perm in itertools.permutations(order):
            s = list_schedule(durations, gpus, perm, nodes, gpus_per_node)
            if _score(s) < _score(best):
                order, best = list(perm), s
                found.append((order, best))
            if best.makespan <= bound * (1 + 1e-9) or time.perf_counter() > deadline:
                break
        return found
    rng = random.Random(seed)
    samples = noisy_durations(durations, robust, sigma, seed + 1)
    limit = best.makespan
    affordable = max_steps // (n * (1 + len(samples)))
    if affordable < MIN_EVALS:
        return found
    max_evals = min(max_evals, affordable)

    def score_of(cand, s):
        if not samples:
            return _score(s)
        prio = dispatch_order(cand, s)
        noisy = sum(list_schedule(x, gpus, prio, nodes, gpus_per_node).makespan for x in samples) / len(samples)
        return (noisy, *_score(s))

    current, cur = list(order), best
    score = score_of(current, cur)
    best_score = score
    last_gain = 0
    cost = one * (1 + robust)  # seconds one candidate takes: never start one that would overrun the budget
    for evals in range(max_evals):
        if (not samples and best.makespan <= bound * (1 + 1e-9)) or evals - last_gain > stall:
            break
        t0 = time.perf_counter()
        if t0 + cost > deadline:
            break
        cand = _neighbour(current, cur, durations, rng)
        s = list_schedule(durations, gpus, cand, nodes, gpus_per_node)
        if s.makespan > limit:
            continue
        sc = score_of(cand, s)
        cost = time.perf_counter() - t0
        if sc <= score:
            current, cur, score = cand, s, sc
            if sc < best_score:
                last_gain = evals
                best_score = sc
                found.append((cand, s))
    return found


def _granular(bound: float, durations: Sequence[float]) -> float:
    """With whole-second durations every finish time is a multiple of their gcd: round up to it."""
    if not durations or any(d != int(d) or d <= 0 for d in durations):
        return bound
    g = 0
    for d in durations:
        g = math.gcd(g, int(d))
    return math.ceil(bound / g - 1e-9) * g


def _neighbour(order: list[int], s: Schedule, durations: Sequence[float], rng: random.Random) -> list[int]:
    """Move a late-finishing test earlier (most of the time), or swap or move two at random."""
    n = len(order)
    cand = list(order)
    r = rng.random()
    if r < 0.5:
        # one of the tests that finish last, moved to an earlier position
        late = sorted(range(n), key=lambda p: -(s.start[order[p]] + durations[order[p]]))[: max(2, n // 10)]
        p = rng.choice(late)
        q = rng.randrange(0, p) if p else 0
        cand.insert(q, cand.pop(p))
    elif r < 0.8:
        p, q = rng.randrange(n), rng.randrange(n)
        cand[p], cand[q] = cand[q], cand[p]
    else:
        p, q = rng.randrange(n), rng.randrange(n)
        cand.insert(q, cand.pop(p))
    return cand
