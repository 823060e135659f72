"""Turn a selection of tests into a night's plan: pool, node, start, priority and timeout.

Each pool is planned on its own: longest-first list scheduling, then the improvement step.
Priorities are the order of predicted starts, so a dispatcher that starts tests in priority order
whenever they fit reproduces the plan exactly when the estimates are right.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

from pipelines.core.model import Assignment, CatalogError, Plan, Pool, Problem, Test, effective_timeout
from pipelines.core.plan.bounds import lower_bound, utilization
from pipelines.core.plan.cluster import any_pool, as_pool, hardware_of, pool_for
from pipelines.core.plan.durations import Duration, medians
from pipelines.core.plan.improve import improve_candidates
from pipelines.core.plan.packing import Schedule, list_schedule, lpt_order
from pipelines.core.plan.predict import PREDICT_DRAWS, predict_makespan
from pipelines.core.plan.robust import (
    EVAL_DRAWS,
    SIGMA,
    evaluation_draws,
    family_z,
    gate_affordable,
    pick_robust,
    pool_assignments,
)
from pipelines.core.specs import PoolSpec

#: improved orders (the search's last few new bests) the robustness gate compares with longest-first
GATE_CANDIDATES = 3
#: with a duration model, the gate's rule orders sort on this quantile of each test's duration
#: (z of log time above the median: 0.674 = p75)
ORDER_Z = 0.674
#: with a duration model, the gate also tries longest-first on p75 x GPUs^a for these a:
#: wide tests leave ragged gaps when they start late, and how much that matters depends on the
#: noise. Not below wide-first's 0.5: a = 0 and 0.25 won on the model's draws and lost on the
#: bench's nights at every sigma (0.5: 1.064 with them, 1.053 without; 0.1 and 0.25 unchanged)
RULE_EXPONENTS = (0.5, 0.75, 1.0)
#: with a duration model the gate replays at least this many nights drawn from it, with the live
#: (reserving) dispatcher; another order replaces wide-first only when faster by MODEL_GATE_Z
#: standard errors, raised for the number of orders compared (robust.family_z: with z = 1 for each
#: of six, luck alone swapped wide-first out on most noisy nights, and those swaps lost)
MODEL_EVAL_DRAWS = 64
MODEL_GATE_Z = 1.0
#: with a duration model the base order is longest-first on median x GPUs^WIDE_EXPONENT: see wide_first
WIDE_EXPONENT = 0.5
GATE_LIVE = True


def wide_first(group: Sequence[Test], model: Mapping[str, Duration]) -> list[int]:
    """Indices of ``group`` longest-first on median x GPUs^0.5; ties: wider spread, more GPUs, id.

    On a noisy night a wide test left to the end waits for a whole node to drain and then runs
    alone on it with nothing to fill around it; 2- and 4-GPU tests fill the gaps the noise opens.
    So wide tests go earlier than their median alone says. The exponent is a measured choice
    (bench/plan.py realistic nights at sigma 0.5, seeds 100-139, not the 20 reported ones): 0.3-0.5
    were within noise of each other (1.044-1.052 x the lower bound), 0.6 and above worse; 0.5
    because lower exponents lost at sigma 0.1-0.25.
    """
    key = [model[t.id].median_s * max(t.gpus, 1) ** WIDE_EXPONENT for t in group]
    return sorted(range(len(group)), key=lambda i: (-key[i], -model[group[i].id].sigma, -group[i].gpus,
                                                    group[i].id))


def too_wide(test: Test, pools: Sequence[PoolSpec]) -> str | None:
    """Why ``test`` cannot be planned on its pool's nodes (more GPUs than one node has), else None.

    A multi-node registration (``stage-d-16-gpu-h200`` on 8-GPU nodes) is one test the deployment
    cannot run, not a broken catalog: it is left unplanned and the rest of the night planned.
    """
    p = pool_for(test, pools)
    if p is None or test.gpus <= p.gpus_per_node:
        return None
    if any_pool(test):  # it names no GPU type: any pool would do, and none has nodes this large
        widest = max(pools, key=lambda q: q.gpus_per_node)
        return (f"needs {test.gpus} GPUs on one node but the largest nodes of this deployment's pools have "
                f"{widest.gpus_per_node} (pool {widest.name}); lower the test's GPU count, disable it, or give a pool "
                f"nodes of {test.gpus} GPUs or more in assets/cluster.yaml")
    return (f"needs {test.gpus} GPUs on one node but pool {p.name} has {p.gpus_per_node} per node; lower the "
            "suite's GPU count, disable the test, or add a pool with larger nodes in assets/cluster.yaml")


def unplanned_reason(test: Test, pools: Sequence[PoolSpec]) -> str:
    """Why :func:`make_plan` left ``test`` unplanned: no pool for its hardware, or nodes too small.

    Both start with "no pool", as ``runset.RunSet.unplanned`` expects of the reasons it records.
    """
    wide = too_wide(test, pools)
    if wide:
        return f"no pool has nodes of {test.gpus} GPUs: the test {wide}"
    return (f"no pool runs hardware {hardware_of(test) or test.suite!r}; add it to a pool's `hardware:` list in "
            "assets/cluster.yaml")


def planned_tests(tests: Sequence[Test], pools: Sequence[PoolSpec]) -> list[Test]:
    """The enabled tests :func:`make_plan` places on ``pools`` (a pool runs their hardware and its
    nodes hold their GPUs): the tests the duration model is fitted over, so a test left unplanned
    never widens the spread pooled over the night's tests."""
    return [t for t in tests if t.enabled and pool_for(t, pools) is not None and not too_wide(t, pools)]


def check_fit(tests: Sequence[Test], pools: Sequence[PoolSpec]) -> None:
    """Raise one CatalogError naming every test with a negative GPU count (a broken record, not a
    plan choice); a test larger than its pool's nodes is unplanned instead (:func:`too_wide`)."""
    problems = [Problem(t.path, t.line, "gpus", f"test {t.id} needs {t.gpus} GPUs; must be 0 or more")
                for t in tests if t.gpus < 0]
    if problems:
        raise CatalogError(problems)


def make_plan(tests: Sequence[Test], pools: Sequence[PoolSpec], *, timeout_floor_s: int = 1800,
              timeout_factor: float = 1.25, improve: bool = True, time_budget_s: float = 10.0,
              max_evals: int = 4000, seed: int = 0, robust: int = 8, eval_draws: int = EVAL_DRAWS,
              sigma: float = SIGMA, gate_candidates: int = GATE_CANDIDATES,
              durations: Mapping[str, Duration] | None = None, predict_draws: int = PREDICT_DRAWS) -> Plan:
    """Plan every enabled test on its pool; tests whose hardware has no pool, or that need more GPUs
    than one node of it has, are ``unplanned`` (:func:`unplanned_reason` says which).

    The improvement step's work is fixed by instance size (same input, same plan; a few seconds
    at worst); ``time_budget_s`` is only a safety net over all pools together. ``robust`` is the number of
    noisy draws the local search scores orders on (0: exact makespan only). An improved order is
    kept only if the robustness gate (``eval_draws`` lognormal(0, ``sigma``) draws replayed with
    the dispatcher, see ``robust.py``) finds it faster than longest-first; a pool too large for
    the gate keeps longest-first. ``eval_draws=0`` keeps the best exact order unchecked.

    ``durations`` (test id -> Duration, see ``durations.py``; missing tests fall back to
    est_time / 1.25) plans from measured medians and spreads instead of est_time: the order is
    longest-first on each test's p75, the search and the gate draw each test around its own
    median with its own sigma, and the Plan gains the predicted makespan's median and p90 over
    ``predict_draws`` simulated nights of the reserving dispatcher. Timeouts stay on est_time.
    """
    deadline = time.perf_counter() + time_budget_s
    tests = [t for t in tests if t.enabled]
    seen: set[str] = set()
    dupes = [t for t in tests if t.id in seen or seen.add(t.id)]  # type: ignore[func-returns-value]
    if dupes:
        raise CatalogError([Problem(t.path, t.line, "id", f"test id {t.id} is planned twice; ids must be unique")
                            for t in dupes])
    check_fit(tests, pools)
    by_pool: dict[str, list[Test]] = {}
    unplanned: list[str] = []
    specs = {p.name: p for p in pools}
    for t in tests:
        p = pool_for(t, pools)
        if p is None or too_wide(t, pools):
            unplanned.append(t.id)
        else:
            by_pool.setdefault(p.name, []).append(t)

    placed: list[tuple[int, int, Assignment]] = []
    rows = []
    for pi, (name, unsorted) in enumerate(by_pool.items()):
        group = sorted(unsorted, key=lambda t: t.id)  # the plan never depends on the input's order
        pool = as_pool(specs[name])
        model = medians(group, durations) if durations is not None else None
        timeouts = [effective_timeout(t.est_time, timeout_floor_s, timeout_factor) for t in group]
        # a test runs no longer than its timeout (the runner kills it there), as the simulated nights cut it
        durs = [min(model[t.id].median_s, float(limit)) if model else float(t.est_time)
                for t, limit in zip(group, timeouts, strict=True)]
        spread = [model[t.id].sigma for t in group] if model else sigma
        gpus = [t.gpus for t in group]
        keys = [model[t.id].quantile(ORDER_Z) for t in group] if model else durs
        order = wide_first(group, model) if model else lpt_order(keys, gpus, [t.id for t in group])
        lb = lower_bound(zip(durs, gpus, strict=True), pool)
        found = [(order, list_schedule(durs, gpus, order, pool.nodes, pool.gpus_per_node))]
        tried = 1 + gate_candidates + (len(RULE_EXPONENTS) if model else 0)
        draws = max(eval_draws, MODEL_EVAL_DRAWS) if model and eval_draws > 0 else eval_draws
        checkable = eval_draws <= 0 or gate_affordable(len(group), draws, tried)
        if improve and checkable:
            found = improve_candidates(durs, gpus, order, pool.nodes, pool.gpus_per_node, bound=lb,
                                       time_budget_s=(deadline - time.perf_counter()) / (len(by_pool) - pi),
                                       max_evals=max_evals, seed=seed, robust=robust, sigma=spread)
        rules = []
        if improve and model and checkable:
            seen_orders = {tuple(o) for o, _ in found}
            for a in RULE_EXPONENTS:
                o = lpt_order([k * g ** a for k, g in zip(keys, gpus, strict=True)], gpus, [t.id for t in group])
                if tuple(o) not in seen_orders:
                    seen_orders.add(tuple(o))
                    rules.append((o, list_schedule(durs, gpus, o, pool.nodes, pool.gpus_per_node)))
        chosen = _gate(group, name, pool, found, timeouts, eval_draws, sigma, seed, gate_candidates, durs, model,
                       rules)
        _, sched, assignments = chosen
        placed.extend((pi, a.priority, a) for a in assignments)
        rows.append((name, sched.makespan, lb, utilization(zip(durs, gpus, strict=True), pool, sched.makespan)))

    # from est_time: priority = predicted start; with a model each pool's own queue order is kept
    placed.sort(key=(lambda x: (x[2].start_s, x[0], x[1])) if durations is None else (lambda x: (x[1], x[0])))
    assignments = tuple(_with_priority(a, prio) for prio, (*_, a) in enumerate(placed))
    plan = Plan(
        assignments=assignments,
        makespan_s=max((r[1] for r in rows), default=0.0),
        lower_bound_s=max((r[2] for r in rows), default=0.0),
        unplanned=tuple(unplanned),
        pools=tuple(rows),
    )
    if durations is None:
        return plan
    planned = [t for group in by_pool.values() for t in group]
    model = medians(planned, durations)
    plan = dataclasses.replace(plan, expected=_expected(planned, model), duration_notes=tuple(
        (t.id, model[t.id].note) for t in sorted(planned, key=lambda t: t.id) if model[t.id].note))
    median, p90 = predict_makespan(plan, [as_pool(p) for p in pools], planned, model, predict_draws, seed)
    return dataclasses.replace(plan, predicted_median_s=median, predicted_p90_s=p90)


def _expected(tests: Sequence[Test], model: Mapping[str, Duration]) -> tuple[tuple[str, float, float, str], ...]:
    """Plan.expected: (test_id, median, p90, source) per test, by id."""
    return tuple((t.id, model[t.id].median_s, model[t.id].p90_s, model[t.id].source)
                 for t in sorted(tests, key=lambda t: t.id))


def _gate(group: list[Test], name: str, pool: Pool, found: list[tuple[list[int], Schedule]], timeouts: list[int],
          eval_draws: int, sigma: float, seed: int, keep: int, durs: list[float],
          model: Mapping[str, Duration] | None,
          rules: Sequence[tuple[list[int], Schedule]] = ()) -> tuple[list[int], Schedule, list[Assignment]]:
    """The base order (``found[0]``: longest-first, or wide-first with a model) or the improved
    or rule order that noise punishes least; with a model another order must beat the base by
    MODEL_GATE_Z standard errors, corrected for how many orders challenge it (picking the lowest of
    several noisy means overrates it)."""
    lpt = found[0]
    ranked = model is not None  # wide-first and the rule orders are dispatched in their own order
    if len(found) == 1 and not rules:
        return (*lpt, pool_assignments(group, name, *lpt, timeouts, durs, ranked))
    if eval_draws <= 0:
        return (*found[-1], pool_assignments(group, name, *found[-1], timeouts, durs))
    # the best few improved orders (each strictly better on exact estimates than the one before),
    # and with a duration model the weighted longest-first rules (judged on noisy nights only)
    kept = found[1:][-keep:] if keep > 0 else []  # [-0:] would be every improved order
    tried = [lpt, *kept, *rules]
    if not gate_affordable(len(group), max(eval_draws, MODEL_EVAL_DRAWS) if model else eval_draws, len(tried)):
        return (*lpt, pool_assignments(group, name, *lpt, timeouts, durs, ranked))
    improved = len(kept)
    cands = [pool_assignments(group, name, o, s, timeouts, durs, ranked and not 0 < i <= improved)
             for i, (o, s) in enumerate(tried)]
    if model:
        draws = evaluation_draws(group, max(eval_draws, MODEL_EVAL_DRAWS), sigma, seed, model)
        z = family_z(MODEL_GATE_Z, len(cands) - 1)
        best, _ = pick_robust(cands, pool, draws, z, _expected(group, model), live=GATE_LIVE)
    else:
        best, _ = pick_robust(cands, pool, evaluation_draws(group, eval_draws, sigma, seed))
    return (*tried[best], cands[best])


def _with_priority(a: Assignment, priority: int) -> Assignment:
    return Assignment(a.test_id, a.pool, a.node, a.start_s, a.end_s, a.gpus, a.timeout_s, priority)
