"""The plan as a CI maintainer reads it before the night starts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipelines.core.model import Plan, Test


def print_plan(plan: Plan, tests: Mapping[str, Test], skipped: Sequence[Test] = ()) -> None:
    spread = (f" (median of simulated nights {plan.predicted_median_s:.1f}s, p90 {plan.predicted_p90_s:.1f}s)"
              if plan.predicted_median_s else "")
    print(f"plan: {len(plan.assignments)} tests, predicted makespan {plan.makespan_s:.1f}s{spread}, "
          f"lower bound {plan.lower_bound_s:.1f}s, ratio {plan.ratio:.3f}")
    print(f"  {'order':>5}  {'test':<48} {'gpus':>4} {'pool/node':<10} {'start':>7} {'end':>7} {'est':>6} {'timeout':>7}")
    for a in plan.ordered():
        t = tests.get(a.test_id)
        est = f"{t.est_time}{'*' if t and t.uncalibrated else ''}" if t else "?"
        print(f"  {a.priority:>5}  {a.test_id:<48} {a.gpus:>4} {a.pool + '/' + str(a.node):<10} "
              f"{a.start_s:>7.1f} {a.end_s:>7.1f} {est:>6} {a.timeout_s:>7}")
    for t in skipped:
        print(f"  {'skip':>5}  {t.id:<48} disabled: {t.disabled}")
    for tid in plan.unplanned:
        print(f"  {'-':>5}  {tid:<48} not planned: no pool runs its hardware")
