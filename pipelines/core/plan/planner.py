"""Turn a selection of tests into a night's plan: pool, node, start, priority and timeout.

Each pool is planned on its own: longest-first list scheduling, then the improvement step.
Priorities are the order of predicted starts, so a dispatcher that starts tests in priority order
whenever they fit reproduces the plan exactly when the estimates are right.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from pipelines.core.model import Assignment, CatalogError, Plan, Problem, Test, effective_timeout
from pipelines.core.plan.bounds import lower_bound, utilization
from pipelines.core.plan.cluster import as_pool, pool_for
from pipelines.core.plan.improve import improve_order
from pipelines.core.plan.packing import list_schedule, lpt_order
from pipelines.core.specs import PoolSpec


def check_fit(tests: Sequence[Test], pools: Sequence[PoolSpec]) -> None:
    """Raise one CatalogError naming every test larger than every node of its pool."""
    problems = []
    for t in tests:
        p = pool_for(t, pools)
        if p is not None and t.gpus > p.gpus_per_node:
            problems.append(Problem(
                t.path, t.line, "gpus",
                f"test {t.id} (suite {t.suite}) needs {t.gpus} GPUs on one node but pool {p.name} has "
                f"{p.gpus_per_node} per node; lower the suite's GPU count, disable the test, or add a "
                f"pool with larger nodes in assets/cluster.yaml"))
        elif t.gpus < 0:
            problems.append(Problem(t.path, t.line, "gpus", f"test {t.id} needs {t.gpus} GPUs; must be 0 or more"))
    if problems:
        raise CatalogError(problems)


def make_plan(tests: Sequence[Test], pools: Sequence[PoolSpec], *, timeout_floor_s: int = 1800,
              timeout_factor: float = 1.25, improve: bool = True, time_budget_s: float = 0.5,
              max_evals: int = 4000, seed: int = 0, robust: int = 4) -> Plan:
    """Plan every enabled test on its pool; tests whose hardware has no pool are ``unplanned``.

    ``time_budget_s`` bounds the improvement step over all pools together; ``robust`` is the
    number of noisy duration draws the improvement step also scores orders on (0: exact only).
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
        if p is None:
            unplanned.append(t.id)
        else:
            by_pool.setdefault(p.name, []).append(t)

    placed: list[tuple[float, int, int, Assignment]] = []
    rows = []
    for pi, (name, group) in enumerate(by_pool.items()):
        pool = as_pool(specs[name])
        durs = [float(t.est_time) for t in group]
        gpus = [t.gpus for t in group]
        order = lpt_order(durs, gpus, [t.id for t in group])
        lb = lower_bound(zip(durs, gpus, strict=True), pool)
        if improve:
            order, sched = improve_order(durs, gpus, order, pool.nodes, pool.gpus_per_node, bound=lb,
                                         time_budget_s=(deadline - time.perf_counter()) / (len(by_pool) - pi),
                                         max_evals=max_evals, seed=seed, robust=robust)
        else:
            sched = list_schedule(durs, gpus, order, pool.nodes, pool.gpus_per_node)
        rank = {i: r for r, i in enumerate(order)}
        for i, t in enumerate(group):
            a = Assignment(t.id, name, sched.node[i], sched.start[i], sched.start[i] + durs[i], t.gpus,
                           effective_timeout(t.est_time, timeout_floor_s, timeout_factor))
            placed.append((sched.start[i], pi, rank[i], a))
        rows.append((name, sched.makespan, lb, utilization(zip(durs, gpus, strict=True), pool, sched.makespan)))

    placed.sort(key=lambda x: x[:3])
    assignments = tuple(_with_priority(a, prio) for prio, (*_, a) in enumerate(placed))
    return Plan(
        assignments=assignments,
        makespan_s=max((r[1] for r in rows), default=0.0),
        lower_bound_s=max((r[2] for r in rows), default=0.0),
        unplanned=tuple(unplanned),
        pools=tuple(rows),
    )


def _with_priority(a: Assignment, priority: int) -> Assignment:
    return Assignment(a.test_id, a.pool, a.node, a.start_s, a.end_s, a.gpus, a.timeout_s, priority)
