"""The night report: what ran, how it ended, how long it took against its estimate, what changes.

Pure formatting over records, so the terminal table, the Markdown file and the Dagster metadata
all say the same thing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipelines.core.model import Attempt, Estimate, Plan, Test


@dataclass(frozen=True)
class Row:
    test_id: str
    outcome: str
    elapsed_s: float | None
    est_time: int
    proposed: int | None
    timeout_s: int | None
    node: str
    attempts: int
    reason: str = ""


def night_rows(
    tests: Sequence[Test],
    skipped: Sequence[Test],
    attempts: Sequence[Attempt],
    estimates: Sequence[Estimate],
    unplanned: Sequence[str] = (),
) -> list[Row]:
    """One row per selected test, in run order, then the skipped ones."""
    last: dict[str, Attempt] = {}
    count: Counter[str] = Counter()
    for a in attempts:
        last[a.test_id] = a
        count[a.test_id] += 1
    proposed = {e.test_id: e.proposed for e in estimates if e.samples_used}
    rows = []
    for t in tests:
        a = last.get(t.id)
        if a is None and t.id in unplanned:
            rows.append(Row(t.id, "unplanned", None, t.est_time, proposed.get(t.id), None, "", 0,
                            f"no pool in this deployment runs {t.hardware or t.suite}"))
            continue
        rows.append(
            Row(t.id, a.outcome if a else "not_run", a.elapsed_s if a else None, t.est_time,
                proposed.get(t.id), a.timeout_s if a else None, a.node if a else "", count[t.id],
                a.reason if a else "")
        )
    for t in skipped:
        rows.append(Row(t.id, "skipped", None, t.est_time, proposed.get(t.id), None, "", 0, t.disabled or ""))
    return rows


def _fmt(v: float | int | None) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if isinstance(v, float) else str(v)


HEADER = ("test", "outcome", "elapsed_s", "est_time", "proposed", "timeout_s", "node")


def table(rows: Sequence[Row]) -> str:
    """A fixed-width table for the terminal."""
    cells = [HEADER] + [
        (r.test_id, r.outcome + (f" (x{r.attempts})" if r.attempts > 1 else ""), _fmt(r.elapsed_s),
         _fmt(r.est_time), _fmt(r.proposed), _fmt(r.timeout_s), r.node)
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(HEADER))).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(
    title: str,
    rows: Sequence[Row],
    plan: Plan | None,
    actual_makespan_s: float | None,
    notes: Sequence[str] = (),
    extra: Mapping[str, str] | None = None,
) -> str:
    """The report file a CI maintainer reads the morning after."""
    outcomes = Counter(r.outcome for r in rows)
    lines = [f"# {title}", ""]
    lines.append("Outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    if plan is not None:
        lines.append(
            f"Predicted makespan {plan.makespan_s:.1f} s (lower bound {plan.lower_bound_s:.1f} s, "
            f"ratio {plan.ratio:.3f}); actual {_fmt(actual_makespan_s)} s"
        )
    for k, v in (extra or {}).items():
        lines.append(f"{k}: {v}")
    lines += ["", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in rows:
        lines.append(
            f"| {r.test_id} | {r.outcome} | {_fmt(r.elapsed_s)} | {r.est_time} | {_fmt(r.proposed)} | "
            f"{_fmt(r.timeout_s)} | {r.node} |"
        )
    failed = [r for r in rows if r.outcome in ("failed", "timed_out", "infra_error", "unplanned", "not_run")]
    if failed:
        lines += ["", "## Not passed", ""]
        lines += [f"- `{r.test_id}`: {r.outcome}: {r.reason}" for r in failed]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"
